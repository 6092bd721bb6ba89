#!/usr/bin/env python
"""What one token's wake-up costs an async client: `Wakeups` against an Event per request.

Every token of every stream wakes the coroutine that reads it; the HTTP process runs one
such coroutine per open stream. This times `concurrency` coroutines that each sleep and
are woken `num_tokens` times by one feeder (as the client's socket reader wakes them),
through `llmd.client.deadline.Wakeups` and through the mechanism it replaced (an
`asyncio.Event` per request awaited with `wait_within`), in the same run:

    .venv/bin/python scripts/bench_client_wakeups.py --concurrency 1 16 64 --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from llmd.client.deadline import Wakeups, wait_within

TIMEOUT_S = 30.0


async def with_wakeups(concurrency: int, num_tokens: int) -> float:
    """Seconds for every coroutine to be woken `num_tokens` times through Wakeups."""
    wakeups = Wakeups()
    inbox = [0] * concurrency
    ids = [str(i) for i in range(concurrency)]
    for request_id in ids:
        wakeups.open(request_id)

    async def reader(index: int) -> None:
        for _ in range(num_tokens):
            while not inbox[index]:
                await wakeups.sleep(ids[index], TIMEOUT_S)
            inbox[index] -= 1

    return await _run(concurrency, num_tokens, reader, inbox, lambda i: wakeups.wake(ids[i]))


async def with_events(concurrency: int, num_tokens: int) -> float:
    """The same through an Event per request awaited with `wait_within` (the old way)."""
    events = [asyncio.Event() for _ in range(concurrency)]
    inbox = [0] * concurrency

    async def reader(index: int) -> None:
        for _ in range(num_tokens):
            while not inbox[index]:
                events[index].clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await wait_within(events[index].wait(), TIMEOUT_S)
            inbox[index] -= 1

    return await _run(concurrency, num_tokens, reader, inbox, lambda i: events[i].set())


async def _run(concurrency, num_tokens, reader, inbox, wake) -> float:
    tasks = [asyncio.ensure_future(reader(i)) for i in range(concurrency)]
    await asyncio.sleep(0)
    started = time.perf_counter()
    for _ in range(num_tokens):  # one "step": a token for every stream, read before the next
        for index in range(concurrency):
            inbox[index] += 1
            wake(index)
        while any(inbox):  # as in serving, a step is far longer than the wake-ups it causes
            await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--num-tokens", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("# µs per token wake-up (median of repeats); old = Event + wait_within")
    print("  streams   old µs   Wakeups µs   speed-up")
    for concurrency in args.concurrency:
        medians = []
        for bench in (with_events, with_wakeups):
            runs = [asyncio.run(bench(concurrency, args.num_tokens)) for _ in range(args.repeats)]
            medians.append(statistics.median(runs) / (concurrency * args.num_tokens) * 1e6)
        old, new = medians
        print(f"  {concurrency:7d}   {old:6.2f}   {new:10.2f}   {old / new:7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
