#!/usr/bin/env bash
# Install (idempotent), lint, and run the whole test suite on CPU: first every test but the
# soak subset (pyproject.toml deselects the `soak` marker), then the soak subset on its own
# (-m soak), so its timing promises are measured on a machine the rest no longer loads.
# Arguments go to both pytest runs; a run they leave no test in (pytest's status 5) is no
# failure unless neither run had a test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh
.venv/bin/ruff check .
status=0
.venv/bin/python -m pytest -q "$@" || status=$?
soak_status=0
.venv/bin/python -m pytest -q -m soak "$@" || soak_status=$?
if [ "$status" -eq 5 ] && [ "$soak_status" -eq 5 ]; then
    exit 5
fi
for code in "$status" "$soak_status"; do
    if [ "$code" -ne 0 ] && [ "$code" -ne 5 ]; then
        exit "$code"
    fi
done
