#!/usr/bin/env bash
# Create .venv and install the project. torch is pinned and installed first so that pip takes
# the CPU wheel instead of a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
EXTRAS=${1:-}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
if [ -n "$EXTRAS" ]; then
  .venv/bin/python -m pip install -q -e ".[$EXTRAS]"
else
  .venv/bin/python -m pip install -q -e .
fi
