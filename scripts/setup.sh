#!/usr/bin/env bash
# Creates .venv with the project and its test dependencies. Idempotent; offline apart from the package registry.
# torch comes first, pinned, so that pip never resolves another (multi-gigabyte) build for the other packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.14.1 torchvision==0.29.1
.venv/bin/python -m pip install -q -e ".[test]"
