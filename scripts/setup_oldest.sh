#!/usr/bin/env bash
# Creates .venv-oldest: the project with its test dependencies, every declared dependency at its declared lower
# bound (scripts/oldest_constraints.py reads them from setup.cfg), torch and torchvision at the build scripts/setup.sh
# pins. .ci/run runs the compatibility subset (`pytest -m compat`) in it, so each floor in setup.cfg is a version the
# suite has passed on. Idempotent: an existing .venv-oldest is brought back to the floors.
#
# Disk: when .venv (scripts/setup.sh) already holds the pinned torch build, its torch stack (5.4 GB, CUDA libraries
# included) is linked, not copied (scripts/share_torch_stack.py), and the new environment costs about 1.3 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV=.venv-oldest
export PIP_NO_CACHE_DIR=1  # the floors are installed once; a wheel cache would only take disk
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
if [ -x .venv/bin/python ] && .venv/bin/python -c \
    "import importlib.metadata as m, sys; sys.exit(m.version('torch') != '2.14.1' or m.version('torchvision') != '0.29.1')"
then
  SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  .venv/bin/python scripts/share_torch_stack.py "$SITE"
fi
# Resolves only torch's small requirements when the stack is linked; installs the whole build otherwise.
"$VENV/bin/python" -m pip install -q torch==2.14.1 torchvision==0.29.1 packaging
"$VENV/bin/python" scripts/oldest_constraints.py > "$VENV/constraints-oldest.txt"
# torch stays at the pinned build: a linked stack must never be upgraded (pip would uninstall it inside .venv).
printf 'torch==2.14.1\ntorchvision==0.29.1\n' >> "$VENV/constraints-oldest.txt"
"$VENV/bin/python" -m pip install -q -c "$VENV/constraints-oldest.txt" -e ".[test]"
