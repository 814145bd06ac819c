#!/usr/bin/env bash
# CI leg: the whole test suite with the oldest versions the pyproject allows.
#
# A fresh venv in .venv-oldest/ (git-ignored) installs the package with the same extras as the
# README's test command, constrained to the lower bounds in .ci/oldest-constraints.txt
# (transitive dependencies the pyproject does not name resolve as pip chooses).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-oldest
rm -rf "$VENV"
start=$(date +%s)
INSTALL="python3 -m venv $VENV && $VENV/bin/pip install -c .ci/oldest-constraints.txt \"torch==2.13.0\" -e \".[all,test]\""
echo "+ $INSTALL"
bash -c "$INSTALL"
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import re
from pathlib import Path

pins = {}
for line in Path(".ci/oldest-constraints.txt").read_text().splitlines():
    line = line.split("#", 1)[0].strip()
    if line:
        name, version = line.split("==")
        pins[name] = version
got = {name: md.version(name) for name in pins}
wrong = {n: (got[n], v) for n, v in pins.items() if re.sub(r"\+.*", "", got[n]) != v}
assert not wrong, f"installed versions differ from the constraints: {wrong}"
print("oldest versions:", ", ".join(f"{n} {v}" for n, v in got.items()))
PY
echo "+ $VENV/bin/python -m pytest -q -n auto --dist loadfile"
"$VENV/bin/python" -m pytest -q -n auto --dist loadfile -p no:cacheprovider
echo "oldest leg: $(( $(date +%s) - start )) s"
