#!/usr/bin/env bash
# Create .venv and install llmd with its test tools.
# On a machine without an NVIDIA GPU, torch is pinned to the CPU build (2.13.0) so pip never
# pulls a multi-GB CUDA wheel; with a GPU, the default (CUDA) build is taken.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "${PIP[@]}" torch
else
    "${PIP[@]}" torch==2.13.0
fi
"${PIP[@]}" -e ".[test]"
