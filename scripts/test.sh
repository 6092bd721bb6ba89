#!/usr/bin/env bash
# Install (idempotent), lint, and run the whole test suite on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest -q "$@"
