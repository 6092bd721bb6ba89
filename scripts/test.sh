#!/usr/bin/env bash
# Install (idempotent), lint, and run the whole test suite on CPU, in three pytest runs:
#   1. every test but the soak subset (pyproject.toml deselects the `soak` marker), with
#      the test daemons' async scheduling off (the CPU default);
#   2. the daemon, HTTP and TUI suites again with async scheduling on (the CUDA default),
#      so both modes are served end to end (LLMD_TEST_ASYNC_SCHEDULING, tests/scheduling_mode.py);
#   3. the soak subset on its own (-m soak), so its timing promises are measured on a
#      machine the rest no longer loads.
# Arguments go to every run (with arguments, run 2 runs them instead of its three folders);
# a run they leave no test in (pytest's status 5) is no failure unless no run had a test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh
.venv/bin/ruff check .
.venv/bin/python -m mypy  # the files and rules are in pyproject.toml's [tool.mypy]
ASYNC_TARGETS=(tests/daemon tests/http tests/tui)
if [ "$#" -gt 0 ]; then
    ASYNC_TARGETS=()
fi
statuses=()
run() {
    local code=0
    "$@" || code=$?
    statuses+=("$code")
}
run env LLMD_TEST_ASYNC_SCHEDULING=0 .venv/bin/python -m pytest -q "$@"
run env LLMD_TEST_ASYNC_SCHEDULING=1 .venv/bin/python -m pytest -q "${ASYNC_TARGETS[@]}" "$@"
run env LLMD_TEST_ASYNC_SCHEDULING=0 .venv/bin/python -m pytest -q -m soak "$@"
num_empty=0
for code in "${statuses[@]}"; do
    if [ "$code" -eq 5 ]; then
        num_empty=$((num_empty + 1))
    elif [ "$code" -ne 0 ]; then
        exit "$code"
    fi
done
if [ "$num_empty" -eq "${#statuses[@]}" ]; then
    exit 5
fi
