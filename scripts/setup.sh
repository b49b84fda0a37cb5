#!/usr/bin/env bash
# Creates .venv with this project in editable mode. Idempotent; offline apart from the package registries (PyPI,
# Debian's apt).
#   bash scripts/setup.sh         what the demo and training need: the package with its `train` extra
#   bash scripts/setup.sh test    the test suite: every extra, pytest and the test tools (`.[test]`), and Debian's
#                                 Chromium for the browser tests of the web app (as root, when missing)
# torch comes first, pinned, so that pip never resolves another (multi-gigabyte) build for the other packages.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") extra=train ;;
  test) extra=test ;;
  *) echo "usage: bash scripts/setup.sh [test]  (no argument: the demo and training; test: the test suite)" >&2
     exit 2 ;;
esac
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.14.1 torchvision==0.29.1
.venv/bin/python -m pip install -q -e ".[$extra]"
[ "$extra" = test ] || exit 0
# The browser tests of the web app (tests/test_app.py) drive Debian's headless Chromium through its chromedriver
# (Playwright's own browser download needs more than the package registries). Installed when missing, as root.
if { ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; } \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq chromium chromium-driver >/dev/null
fi
