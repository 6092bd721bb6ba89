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


class Wakeups:
    """One sleeping coroutine per open request id, woken when something arrives for it.

    A bare future and one timer per sleep, not `wait_within`'s task and `asyncio.wait`:
    an async client sleeps once per token of every stream (the HTTP process's hottest
    await). A cancel still always wins: a task cancelled while its future is already
    resolved raises CancelledError anyway.
    """

    def __init__(self) -> None:
        self._waiters: dict[str, asyncio.Future[None] | None] = {}
        """Per open id: the future its coroutine sleeps on (None while it is awake)."""

    def open(self, request_id: str) -> None:
        """Start tracking `request_id` (a wake before anyone sleeps on it is a no-op)."""
        self._waiters[request_id] = None

    def close(self, request_id: str) -> None:
        """Stop tracking `request_id` (unknown ids are ignored)."""
        self._waiters.pop(request_id, None)

    def wake(self, request_id: str) -> None:
        """Wake the coroutine sleeping on `request_id`, if one is."""
        _settle(self._waiters.get(request_id))

    async def sleep(self, request_id: str, timeout_s: float) -> None:
        """Until `wake(request_id)` or `timeout_s` passed, whichever comes first."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters[request_id] = waiter
        timer = loop.call_later(timeout_s, _settle, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            if self._waiters.get(request_id) is waiter:
                self._waiters[request_id] = None


def _settle(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)
