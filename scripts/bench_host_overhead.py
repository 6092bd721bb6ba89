#!/usr/bin/env python3
"""Per-step host time of preparing a decode step: persistent batch vs rebuild from lists.

    python scripts/bench_host_overhead.py                  # 1, 64, 256 seqs x 2,000 blocks, CPU
    python scripts/bench_host_overhead.py --json out.json

Each sequence holds `--num-blocks` KV blocks and decodes one token per step (a new block
every `block_size` steps). Per step it times the input tensors (`build_step_batch` over the
persistent block table, against `build_input_batch`, which rebuilds padded block tables from
Python lists: the baseline, measured in the same run) plus the sampling batch. The figure
is the median over `--steps` steps; the goal is at most 1 ms at 256 x 2,000 on CPU. The
`plan` column is the engine's side: writing the step's plan data (`PlanWriter`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmd.engine.plan_writer import PlanWriter
from llmd.engine.request import Request, RequestStatus
from llmd.runner.input_batch import build_input_batch
from llmd.runner.persistent_batch import PersistentBatch
from llmd.runner.sampling_batch import build_sampling_batch
from llmd.runner.sampling_state import SamplingState
from llmd.runner.step_batch import build_step_batch, build_step_sampling_batch
from llmd.sampling_params import SamplingParams

BLOCK_SIZE = 16
VOCAB_SIZE = 32_000


def make_requests(num_seqs: int, num_blocks: int) -> list[Request]:
    """Running requests at the end of their `num_blocks`-th block, about to decode."""
    num_tokens = num_blocks * BLOCK_SIZE
    prompt = [1] * num_tokens
    requests = []
    for index in range(num_seqs):
        params = SamplingParams(temperature=0.0, max_tokens=10**6, ignore_eos=True)
        request = Request(f"r{index}", prompt, params)
        request.block_ids = list(range(index * 4096, index * 4096 + num_blocks))
        request.num_computed_tokens = num_tokens - 1
        request.status = RequestStatus.RUNNING
        requests.append(request)
    return requests


def advance(requests: list[Request]) -> None:
    """What the scheduler does between decode steps: one more token, a block when full."""
    for request in requests:
        request.num_computed_tokens += 1
        request.all_token_ids.append(2)
        if request.num_computed_tokens % BLOCK_SIZE == 0:
            request.block_ids.append(request.block_ids[-1] + 1)


def bench(
    num_seqs: int, num_blocks: int, num_steps: int, use_persistent: bool
) -> tuple[float, float]:
    """Median host milliseconds to prepare one decode step, and to write its plan."""
    requests = make_requests(num_seqs, num_blocks)
    device = torch.device("cpu")
    persistent = PersistentBatch(num_seqs, num_blocks + num_steps // BLOCK_SIZE + 2, device)
    state = SamplingState(VOCAB_SIZE, device)
    writer = PlanWriter()
    times = []
    plan_times = []
    for _ in range(num_steps + 1):
        if not use_persistent:
            writer = PlanWriter()  # the baseline is sent whole block tables every step
        written = time.perf_counter()
        plan = writer.plan([(request, 1, True) for request in requests])
        started = time.perf_counter()
        if use_persistent:
            batch = build_step_batch(plan, BLOCK_SIZE, persistent)
            build_step_sampling_batch(plan.chunks, persistent, state)
        else:
            batch = build_input_batch(plan, BLOCK_SIZE, device)
            build_sampling_batch(requests, VOCAB_SIZE, device)
        times.append(time.perf_counter() - started)
        plan_times.append(started - written)
        del batch
        advance(requests)
    # The first step writes whole rows.
    return statistics.median(times[1:]) * 1000, statistics.median(plan_times[1:]) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-seqs", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--num-blocks", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    command = "python scripts/bench_host_overhead.py " + " ".join(sys.argv[1:])
    print(f"# {command.strip()}\n# per-step host ms (median of {args.steps} decode steps)")
    print(f"{'seqs':>6} {'blocks':>7} {'persistent':>11} {'rebuilt':>9} {'speed-up':>9} "
          f"{'plan':>7}")  # fmt: skip
    rows = []
    for num_seqs in args.num_seqs:
        persistent_ms, plan_ms = bench(num_seqs, args.num_blocks, args.steps, True)
        rebuilt_ms, _ = bench(num_seqs, args.num_blocks, args.steps, False)
        ratio = rebuilt_ms / persistent_ms
        print(f"{num_seqs:>6} {args.num_blocks:>7} {persistent_ms:>11.3f} {rebuilt_ms:>9.3f} "
              f"{ratio:>8.1f}x {plan_ms:>7.3f}")  # fmt: skip
        rows.append({"num_seqs": num_seqs, "num_blocks": args.num_blocks,
                     "persistent_ms": persistent_ms, "rebuilt_ms": rebuilt_ms,
                     "plan_ms": plan_ms})  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"command": command, "results": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
