#!/usr/bin/env bash
# One command for a GPU machine: llmd's CUDA tests, kernel bandwidth and end-to-end throughput.
#
#   scripts/gpu_check.sh [OUT_DIR]            # default OUT_DIR: gpu-check-out/
#
# Stages (each with its own timeout; a failure is recorded in the report, never fatal):
#   env            versions, GPU name (nvidia-smi); stops early if the machine cannot run it
#   kernel_tests   pytest -m cuda tests/kernels tests/attention and the W4A16 layer tests
#   bench_kernels  scripts/bench_kernels.py --json (GB/s and % of copy bandwidth)
#   engine_tests   pytest -m cuda tests/runner tests/layers tests/integration
#                  (CUDA graphs vs eager vs HF greedy tokens, async vs sync scheduling,
#                  KV profiling, torch backend)
#   e2e_*          scripts/bench_offline.py on a random Qwen3-0.6B-shaped bf16 checkpoint:
#                  llmd Triton + CUDA graphs with async scheduling off and on, HF
#                  transformers (GPU_CHECK_TORCH_BACKEND=1 adds the eager torch backend)
#   host_gap       scripts/bench_host_gap.py: device idle between decode steps at batch 64,
#                  async scheduling off and on (CUDA events)
# Then $OUT_DIR/gpu-report.md and gpu-report.json (scripts/make_gpu_report.py).
#
# It installs nothing. It needs an NVIDIA GPU, nvidia-smi, and a Python (PYTHON, else
# .venv/bin/python, else python3) with a CUDA build of torch, triton, transformers,
# safetensors, tokenizers and pytest: `pip install -e '.[test]'` over a CUDA torch wheel.
# The whole run stays within GPU_CHECK_BUDGET_S seconds (default 400, under 7 minutes):
# a stage's timeout is cut to the time left, and stages past the budget are skipped.
# GPU_CHECK_NUM_REQUESTS (default 256) sizes the end-to-end workload.
set -euo pipefail

cd "$(dirname "$0")/.."
COMMAND="scripts/gpu_check.sh${*:+ $*}"
for variable in GPU_CHECK_NUM_REQUESTS GPU_CHECK_BUDGET_S GPU_CHECK_TORCH_BACKEND PYTHON; do
    if [[ -n "${!variable:-}" ]]; then COMMAND="$variable=${!variable} $COMMAND"; fi
done
OUT_DIR=${1:-gpu-check-out}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
BUDGET_S=${GPU_CHECK_BUDGET_S:-400}
NUM_REQUESTS=${GPU_CHECK_NUM_REQUESTS:-256}
STARTED=$(date +%s)
STAGES="$OUT_DIR/stages.tsv"
: >"$STAGES"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
WORK_DIR=$(mktemp -d)
trap 'rm -rf "$WORK_DIR"' EXIT
CHECKPOINT="$WORK_DIR/qwen3-0.6b-random"

unset TRITON_INTERPRET # kernels must compile for the GPU, not run in the interpreter
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1

FAILED=0
record() { # name status seconds exit_code limit note
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$STAGES"
}

run_stage() { # name timeout_s command...: run under a timeout into name.log; never aborts
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET_S - ($(date +%s) - STARTED) - 10))
    if ((left < 20)); then
        record "$name" skipped 0 - - "out of the ${BUDGET_S} s time budget"
        echo "[gpu_check] $name: skipped (out of time budget)"
        FAILED=1
        return 0
    fi
    if ((limit > left)); then limit=$left; fi
    local begin rc=0 status=passed
    begin=$(date +%s)
    echo "[gpu_check] $name (limit ${limit} s): $*"
    timeout --kill-after=10 "$limit" "$@" >"$OUT_DIR/$name.log" 2>&1 || rc=$?
    if ((rc == 124 || rc == 137)); then
        status=timeout
    elif ((rc != 0)); then
        status=failed
    fi
    if [[ $status != passed ]]; then FAILED=1; fi
    record "$name" "$status" "$(($(date +%s) - begin))" "$rc" "$limit" ""
    echo "[gpu_check] $name: $status (exit $rc, $(($(date +%s) - begin)) s)"
}

write_report() {
    "$PYTHON" scripts/make_gpu_report.py report --out-dir "$OUT_DIR" --command "$COMMAND" \
        >"$OUT_DIR/report.log" 2>&1 || echo "[gpu_check] report failed: see $OUT_DIR/report.log"
    echo "[gpu_check] report: $OUT_DIR/gpu-report.md"
}

# ---------------------------------------------------------------- environment
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
    >"$OUT_DIR/nvidia-smi.txt" 2>&1 || echo "nvidia-smi unavailable" >"$OUT_DIR/nvidia-smi.txt"
echo "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    "($(git status --porcelain 2>/dev/null | wc -l) uncommitted changes)" >"$OUT_DIR/git.txt"
run_stage env 60 "$PYTHON" scripts/make_gpu_report.py env --out "$OUT_DIR/env.json"
if [[ $(tail -n 1 "$STAGES" | cut -f 2) != passed ]]; then
    echo "[gpu_check] this machine cannot run the check; see $OUT_DIR/env.log"
    write_report
    exit 2
fi

# ---------------------------------------------------------------- correctness on CUDA
run_stage kernel_tests 100 "$PYTHON" -m pytest -m cuda tests/kernels tests/attention \
    tests/quantization/test_triton_int4_linear.py -q \
    -p no:cacheprovider --junitxml="$OUT_DIR/kernel_tests.xml"

# ---------------------------------------------------------------- kernel bandwidth (cheap: early)
run_stage bench_kernels 60 "$PYTHON" scripts/bench_kernels.py --json "$OUT_DIR/bench_kernels.json"
run_stage engine_tests 90 "$PYTHON" -m pytest -m cuda tests/runner tests/layers \
    tests/integration -q -p no:cacheprovider --junitxml="$OUT_DIR/engine_tests.xml"

# ---------------------------------------------------------------- end to end
BENCH=(scripts/bench_offline.py --shape qwen3-0.6b --model "$CHECKPOINT" --device cuda
    --num-requests "$NUM_REQUESTS" --repeats 1 --hf-batch-size 64 --max-model-len 1024
    --gpu-memory-utilization 0.8)
run_stage e2e_checkpoint 90 "$PYTHON" -c "
import sys
from pathlib import Path
sys.path.insert(0, 'scripts')
import bench_offline as bench
arch, shape, dtype = bench.SHAPES['qwen3-0.6b']
bench.make_checkpoint(Path('$CHECKPOINT'), shape, arch, dtype, 'cuda')
print('saved', '$CHECKPOINT')
"
run_stage e2e_triton_sync 75 "$PYTHON" "${BENCH[@]}" --skip-hf --attention-backend triton \
    --no-async-scheduling --warmup-requests 16 --json "$OUT_DIR/e2e_triton_sync.json"
run_stage e2e_triton_async 75 "$PYTHON" "${BENCH[@]}" --skip-hf --attention-backend triton \
    --async-scheduling --warmup-requests 16 --json "$OUT_DIR/e2e_triton_async.json"

# ---------------------------------------------------------------- host gap
run_stage host_gap 60 "$PYTHON" scripts/bench_host_gap.py --model "$CHECKPOINT" --device cuda \
    --batch-size 64 --json "$OUT_DIR/host_gap.json"

# ---------------------------------------------------------------- the HF baseline
run_stage e2e_hf 90 "$PYTHON" "${BENCH[@]}" --skip-llmd --json "$OUT_DIR/e2e_hf.json"
if [[ -n "${GPU_CHECK_TORCH_BACKEND:-}" ]]; then
    run_stage e2e_torch 90 "$PYTHON" "${BENCH[@]}" --skip-hf --attention-backend torch \
        --no-async-scheduling --json "$OUT_DIR/e2e_torch.json"
fi

write_report
echo "[gpu_check] done in $(($(date +%s) - STARTED)) s"
exit "$FAILED"
