"""Concurrency and abort scenarios: many streams at once, and KV freed soon after an abort.

Both run real clients (`AsyncClient`) against a running daemon and count what came back;
the abort scenario polls the daemon's own stats for the blocks still in use.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections import Counter

from llmd.client import AsyncClient, Finished, TokenDelta
from llmd.errors import LLMDError
from scripts.soak_suite.daemon_process import DaemonProcess, used_blocks
from scripts.soak_suite.result import ScenarioResult

PROMPTS = (
    "Once upon a time",
    "The cat sat on the",
    "In a small village there lived",
    "Tell me a story about a dog.",
    "Hello",
    "The weather today is",
)
CLIENT_TIMEOUT_S = 30.0
ABORT_FREED_LIMIT_S = 1.0


def prompt_for(index: int) -> str:
    """A short prompt that varies with `index` (some share prefixes, some do not)."""
    return f"{PROMPTS[index % len(PROMPTS)]} {index % 97}"


def run_concurrency(
    daemon: DaemonProcess, num_streams: int = 256, max_tokens: int = 16, num_clients: int = 16
) -> ScenarioResult:
    """`num_streams` concurrent streams: every one completes with all its tokens, 0 failures."""
    result = ScenarioResult("concurrency")
    outcomes = asyncio.run(_concurrency(daemon.address, num_streams, max_tokens, num_clients))
    tally = Counter(outcomes)
    result.counts.update(
        {"num_sent": num_streams, "max_tokens": max_tokens, "num_clients": num_clients}
    )
    result.counts["outcomes"] = dict(tally)
    result.counts["num_completed"] = tally["completed"]
    result.counts["num_failed"] = num_streams - tally["completed"]
    result.check(
        "all streams completed",
        tally["completed"] == num_streams,
        f"{dict(tally)}",
    )
    idle = daemon.wait_idle()
    result.counts["used_blocks_at_idle"] = used_blocks(idle)
    result.check("no blocks used at idle", used_blocks(idle) == 0)
    return result.finish()


async def _concurrency(
    address: str, num_streams: int, max_tokens: int, num_clients: int
) -> list[str]:
    clients = [AsyncClient(address, timeout=CLIENT_TIMEOUT_S) for _ in range(num_clients)]
    params = {"max_tokens": max_tokens, "ignore_eos": True, "temperature": 0}
    start = asyncio.Event()

    async def one(index: int) -> str:
        await start.wait()
        client = clients[index % num_clients]
        num_streamed = 0
        try:
            async with contextlib.aclosing(client.stream(prompt_for(index), params=params)) as s:
                async for event in s:
                    if isinstance(event, TokenDelta):
                        num_streamed += len(event.token_ids)
                    elif isinstance(event, Finished):
                        is_whole = len(event.token_ids) == max_tokens == num_streamed
                        if event.finish_reason == "length" and is_whole:
                            return "completed"
                        return f"finished:{event.finish_reason}:{num_streamed}"
        except LLMDError as error:
            return f"error:{error.code}"
        return "no finished message"

    tasks = [asyncio.ensure_future(one(i)) for i in range(num_streams)]
    start.set()  # every stream is sent before any is read
    try:
        return list(await asyncio.wait_for(asyncio.gather(*tasks), 10 * CLIENT_TIMEOUT_S))
    except asyncio.TimeoutError:
        return [t.result() if t.done() else "hung" for t in tasks]
    finally:
        for client in clients:
            await client.close()


def run_aborts(
    daemon: DaemonProcess, num_aborts: int = 100, limit_s: float = ABORT_FREED_LIMIT_S
) -> ScenarioResult:
    """Abort `num_aborts` streams mid-way (explicit abort and closing, alternately).

    Each abort must be confirmed (an explicit abort gets `finished: abort`) and the
    daemon must report zero used KV blocks within `limit_s` of it.
    """
    result = ScenarioResult("aborts")
    freed_s, outcomes = asyncio.run(_aborts(daemon.address, num_aborts))
    tally = Counter(outcomes)
    measured = [s for s in freed_s if s is not None]
    result.counts.update(
        {
            "num_aborts": num_aborts,
            "outcomes": dict(tally),
            "num_freed": len(measured),
            "freed_p50_ms": round(1000 * statistics.median(measured), 2) if measured else None,
            "freed_max_ms": round(1000 * max(measured), 2) if measured else None,
            "limit_ms": 1000 * limit_s,
        }
    )
    result.check("every abort confirmed", tally["aborted"] == num_aborts, f"{dict(tally)}")
    result.check(
        f"KV freed within {limit_s:g} s of every abort",
        len(measured) == num_aborts and max(measured, default=0.0) <= limit_s,
        f"{len(measured)} of {num_aborts} freed, max {max(measured, default=0.0):.3f}s",
    )
    return result.finish()


async def _aborts(address: str, num_aborts: int) -> tuple[list[float | None], list[str]]:
    params = {"max_tokens": 200, "ignore_eos": True, "temperature": 0}
    freed_s: list[float | None] = []
    outcomes: list[str] = []
    async with (
        AsyncClient(address, CLIENT_TIMEOUT_S) as client,
        AsyncClient(address, CLIENT_TIMEOUT_S) as observer,
    ):
        for index in range(num_aborts):
            is_explicit = index % 2 == 0
            outcome = "no tokens"
            aborted_at = 0.0
            try:
                async with contextlib.aclosing(
                    client.stream(prompt_for(index), params=params)
                ) as s:
                    num_tokens = 0
                    async for event in s:
                        if isinstance(event, TokenDelta):
                            num_tokens += len(event.token_ids)
                            if num_tokens >= 2 and not aborted_at:
                                aborted_at = time.monotonic()
                                if not is_explicit:
                                    outcome = "aborted"  # closing the stream sends the abort
                                    break
                                await client.abort(event.id)
                        elif isinstance(event, Finished):
                            outcome = (
                                "aborted"
                                if event.finish_reason == "abort"
                                else (f"finished:{event.finish_reason}")
                            )
            except LLMDError as error:
                outcome = f"error:{error.code}"
            outcomes.append(outcome)
            freed_s.append(await _time_to_free(observer, aborted_at) if aborted_at else None)
    return freed_s, outcomes


async def _time_to_free(observer: AsyncClient, since: float, limit_s: float = 5.0) -> float | None:
    """Seconds from `since` until the daemon reports no used blocks (None: not within limit)."""
    while time.monotonic() - since < limit_s:
        snapshot = await observer.stats(include_requests=False, include_block_map=False)
        if used_blocks(snapshot) == 0 and snapshot.daemon.num_in_flight == 0:
            return time.monotonic() - since
        await asyncio.sleep(0.002)
    return None
