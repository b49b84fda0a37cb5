#!/usr/bin/env bash
# Creates .venv-oldest: the project with its test dependencies, every declared dependency at its declared lower
# bound (scripts/oldest_constraints.py reads them from setup.cfg), torch and torchvision at the build scripts/setup.sh
# pins. .ci/run runs the compatibility subset (`pytest -m compat`) in it, so each floor in setup.cfg is a version the
# suite has passed on. Idempotent: an existing .venv-oldest is brought back to the floors.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV=.venv-oldest
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q torch==2.14.1 torchvision==0.29.1 packaging
"$VENV/bin/python" scripts/oldest_constraints.py > "$VENV/constraints-oldest.txt"
"$VENV/bin/python" -m pip install -q -c "$VENV/constraints-oldest.txt" -e ".[test]"
