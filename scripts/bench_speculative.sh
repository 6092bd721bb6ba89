#!/usr/bin/env bash
# n-gram speculation on against off: `llmd serve` without and with `--speculative-method
# ngram`, one daemon at a time, each driven by `llmd bench serve` at several concurrencies;
# repeated, each repeat's on and off runs sharing its seed. Prints one line per run (the
# bench's throughput line) and leaves each run's JSON in $OUT_DIR. Medians are the reader's.
#
#   scripts/bench_speculative.sh                      # default model, repeat dataset
#   MODEL_ARGS="--model DIR" DATASET=random CONCURRENCIES="1 32" scripts/bench_speculative.sh
set -euo pipefail
cd "$(dirname "$0")/.."
LLMD=(.venv/bin/python -m llmd.cli)
DATASET=${DATASET:-repeat}
CONCURRENCIES=${CONCURRENCIES:-1 8 32}
REPEATS=${REPEATS:-3}
NUM_SPECULATIVE_TOKENS=${NUM_SPECULATIVE_TOKENS:-4}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/llmd-spec-bench.XXXXXX)}
read -r -a MODEL_ARGS <<< "${MODEL_ARGS:-}"
mkdir -p "$OUT_DIR"
for rep in $(seq 1 "$REPEATS"); do
  for mode in off ngram; do
    address="ipc://$OUT_DIR/$mode.sock"
    spec_args=()
    [ "$mode" = ngram ] && spec_args=(--speculative-method ngram --num-speculative-tokens "$NUM_SPECULATIVE_TOKENS")
    "${LLMD[@]}" serve "${MODEL_ARGS[@]}" --address "$address" --no-http --num-threads 2 \
      "${spec_args[@]}" > "$OUT_DIR/serve-$mode-$rep.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 120); do
      "${LLMD[@]}" status --address "$address" > /dev/null 2>&1 && break
      sleep 1
    done
    for concurrency in $CONCURRENCIES; do
      num_prompts=$(( concurrency < 8 ? 12 : 2 * concurrency ))
      line=$("${LLMD[@]}" bench serve --address "$address" --dataset "$DATASET" \
        --max-concurrency "$concurrency" --num-prompts "$num_prompts" --input-len 96 \
        --output-len 128 --seed "$rep" --json "$OUT_DIR/$DATASET-$mode-$concurrency-$rep.json" \
        | grep -E "^throughput")
      echo "repeat $rep $mode concurrency $concurrency: $line"
    done
    kill "$pid"
    wait "$pid" 2> /dev/null || true
  done
done
echo "runs in $OUT_DIR"
