#!/usr/bin/env python3
"""Engine-thread time to abort every waiting request of a long queue, newest first.

    python scripts/bench_queue_aborts.py                  # 2,000 / 8,000 / 20,000 waiting

A client that disconnects with thousands of queued requests makes the engine thread abort
them all between two steps. For each policy (fcfs, priority) and queue length it times
`Scheduler.finish_request(..., ABORT)` for every request, against the same aborts done with
a linear scan of a deque (what the queues did before removal became O(1)), measured in the
same run. Medians of `--repeats`; per-abort time should stay flat as the queue grows.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmd.config import SchedulerConfig
from llmd.engine.block_manager import BlockManager
from llmd.engine.request import FinishReason, Request
from llmd.engine.scheduler import Scheduler
from llmd.sampling_params import SamplingParams


def make_requests(num_requests: int) -> list[Request]:
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    return [
        Request(f"r{i}", [1, 2, 3, 4], params, eos_token_ids=(0,), arrival_time=float(i))
        for i in range(num_requests)
    ]


def time_scheduler_aborts(policy: str, num_requests: int) -> float:
    """Seconds to abort all of `num_requests` waiting requests through the scheduler."""
    config = SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=64, max_model_len=128,
                             policy=policy)  # fmt: skip
    scheduler = Scheduler(config, BlockManager(64, 4, True))
    requests = make_requests(num_requests)
    for request in requests:
        scheduler.add_request(request)
    start = time.perf_counter()
    for request in reversed(requests):
        scheduler.finish_request(request.request_id, FinishReason.ABORT)
    return time.perf_counter() - start


def time_scan_aborts(num_requests: int) -> float:
    """Seconds for the baseline: removing each request from a deque by a linear scan."""
    requests = make_requests(num_requests)
    queue = deque(requests)
    start = time.perf_counter()
    for request in reversed(requests):
        queue.remove(request)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 8000, 20000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("policy     waiting   per abort (us)   linear-scan baseline (us)   baseline/ours")
    for policy in ("fcfs", "priority"):
        for size in args.sizes:
            ours = statistics.median(time_scheduler_aborts(policy, size)
                                     for _ in range(args.repeats))  # fmt: skip
            scan = statistics.median(time_scan_aborts(size) for _ in range(args.repeats))
            print(f"{policy:9s} {size:8d} {ours / size * 1e6:16.2f} {scan / size * 1e6:27.2f}"
                  f" {scan / ours:15.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
