#!/usr/bin/env bash
# CI leg: fedlangevin.flower with Flower installed (the [flower] extra: flwr[simulation]==1.41.0,
# which pulls Ray). The main suite runs without Flower (its tests skip there); this leg runs
# tests/flower (the client handler, the run_simulation equality with 10 clients, schemes I and
# II, a dropped client, server checkpoints, the localhost deployment with a SuperLink and two
# SuperNodes on 127.0.0.1) and the streams tests, in a fresh venv (.venvflower/, git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venvflower
rm -rf "$VENV"
start=$(date +%s)
python3 -m venv "$VENV"
"$VENV/bin/pip" install "torch==2.13.0" -e ".[all,flower,test]"
echo "flower leg install: $(( $(date +%s) - start )) s"
start=$(date +%s)
"$VENV/bin/python" -m pytest -q tests/flower tests/federation/test_streams.py
echo "flower leg tests: $(( $(date +%s) - start )) s"
