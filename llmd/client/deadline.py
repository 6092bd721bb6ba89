"""Awaiting with a time limit without losing a cancellation.

Python 3.10 and 3.11's `asyncio.wait_for` returns the inner result, and swallows the
caller's cancellation, when both happen in the same loop iteration; a client cancelled as
a token arrives then kept generating (an HTTP request could run on after its client left).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def wait_within(awaitable: Awaitable[T], timeout_s: float | None) -> T:
    """`awaitable`'s result; asyncio.TimeoutError after `timeout_s`; a cancel always wins.

    A cancellation of the caller is re-raised even if the result is ready (the result is
    then dropped; the caller is going away). On timeout the inner task is cancelled.
    """
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        raise asyncio.TimeoutError
    return task.result()


async def get_within(queue: asyncio.Queue[T], timeout_s: float | None) -> T:
    """The next item of `queue` (at once if one is there), as `wait_within` times and cancels.

    A timed-out get leaves a late item in the queue; a cancelled one may take it with it
    (the caller, going away, does not read that queue again).
    """
    if not queue.empty():
        return queue.get_nowait()
    return await wait_within(queue.get(), timeout_s)
