#!/usr/bin/env python
"""Where a loaded daemon's CPU goes, thread by thread: the forward pass against everything else.

Starts `llmd serve` (the shipped model unless --model), keeps it busy with streaming
clients, and reads each of its threads' CPU time from /proc over --window seconds. The
daemon names its threads in the OS (llmd/daemon/thread_names.py); torch's OpenMP workers
inherit the engine thread's name, so "forward pass" is the engine thread and its workers.
The question it answers: do the I/O, text and tokenizer threads take cores from the
forward pass? Prints, per group, % of one core and % of the daemon's CPU, the median of
--repeats windows.

    .venv/bin/python scripts/bench_daemon_threads.py --window 20 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # sibling scripts
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from bench_top_cost import CLOCK_TICKS, Load, start_daemon

GROUPS = {
    "llmd-engine": "forward pass (engine thread + OpenMP workers)",
    "llmd-text": "text (detokenize, stream out)",
    "llmd-tokenize": "tokenizer pool",
    "llmd-gate": "connection gate (monitor events, refusals)",
    "llmd-io": "OpenMP workers the I/O thread started (a defect: a second pool)",
}
MAIN = "I/O loop (main thread)"


def thread_cpu_seconds(pid: int) -> dict[int, tuple[str, float]]:
    """Thread id -> (OS name, user + system CPU seconds so far) for every thread of `pid`."""
    threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended while we looked
            continue
        threads[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / CLOCK_TICKS)
    return threads


def group_of(pid: int, tid: int, name: str) -> str:
    """The part of the daemon a thread serves, from its id and OS name."""
    if tid == pid:
        return MAIN
    return GROUPS.get(name, f"other ({name})")


def window_shares(pid: int, window_s: float) -> dict[str, float]:
    """% of one core each thread group used over a window of `window_s` seconds."""
    before = thread_cpu_seconds(pid)
    start = time.monotonic()
    time.sleep(window_s)
    after = thread_cpu_seconds(pid)
    elapsed = time.monotonic() - start
    shares: dict[str, float] = defaultdict(float)
    for tid, (name, seconds) in after.items():
        used = seconds - before.get(tid, (name, 0.0))[1]
        shares[group_of(pid, tid, name)] += 100 * used / elapsed
    return dict(shares)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="checkpoint (default: the shipped model)")
    parser.add_argument("--clients", type=int, default=16, help="streaming clients")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds before measuring")
    parser.add_argument("--window", type=float, default=20.0, help="seconds per window")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="write results here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        address = f"ipc://{tmp}/llmd.sock"
        daemon = start_daemon(address, args.model, Path(tmp) / "daemon.log")
        try:
            with Load(address, args.clients, args.max_tokens) as load:
                time.sleep(args.warmup)
                done_before = load.num_requests
                windows = [window_shares(daemon.pid, args.window) for _ in range(args.repeats)]
                num_requests = load.num_requests - done_before
        finally:
            daemon.terminate()
            daemon.wait(30)

    groups = sorted({group for window in windows for group in window})
    medians = {g: statistics.median(w.get(g, 0.0) for w in windows) for g in groups}
    total = sum(medians.values())
    forward = medians.get(GROUPS["llmd-engine"], 0.0)
    print(
        f"{args.clients} streaming clients x {args.max_tokens} tokens, {os.cpu_count()} cores, "
        f"{args.repeats} windows of {args.window:.0f} s ({num_requests} requests finished); "
        "median % of one core:"
    )
    for group in sorted(groups, key=lambda g: -medians[g]):
        print(f"  {group:<48} {medians[group]:7.1f}%  ({100 * medians[group] / total:5.1f}%)")
    rest = total - forward
    print(f"everything but the forward pass: {rest:.1f}% of a core = {100 * rest / total:.1f}% "
          "of the daemon's CPU")  # fmt: skip
    if args.json:
        args.json.write_text(
            json.dumps({"windows": windows, "median_pct_of_core": medians}, indent=2)
        )


if __name__ == "__main__":
    main()
