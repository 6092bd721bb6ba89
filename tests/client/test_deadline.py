"""wait_within, get_within and Wakeups: time limits that never swallow a cancellation."""

from __future__ import annotations

import asyncio

import pytest

from llmd.client.deadline import Wakeups, get_within, wait_within


async def test_a_cancel_racing_an_arriving_item_is_not_swallowed():
    queue: asyncio.Queue = asyncio.Queue()
    waiter = asyncio.ensure_future(get_within(queue, 30.0))
    await asyncio.sleep(0)  # parked on the empty queue
    queue.put_nowait("token")  # the item and the cancel land in the same loop iteration
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter  # asyncio.wait_for on Python 3.11 returns "token" here instead


async def test_the_time_limit_raises_timeout_and_leaves_later_items_queued():
    queue: asyncio.Queue = asyncio.Queue()
    with pytest.raises(asyncio.TimeoutError):
        await get_within(queue, 0.01)
    queue.put_nowait(1)
    queue.put_nowait(2)
    assert [await get_within(queue, 1.0), await get_within(queue, 1.0)] == [1, 2]


async def test_a_ready_result_is_returned_and_an_inner_error_raised():
    future = asyncio.get_running_loop().create_future()
    future.set_result(7)
    assert await wait_within(future, 1.0) == 7

    async def fails():
        raise ValueError("inner")

    with pytest.raises(ValueError, match="inner"):
        await wait_within(fails(), 1.0)


async def test_a_timed_out_awaitable_is_cancelled():
    started = asyncio.Event()

    async def slow():
        started.set()
        await asyncio.sleep(30)

    task = asyncio.ensure_future(slow())
    with pytest.raises(asyncio.TimeoutError):
        await wait_within(task, 0.01)
    await asyncio.sleep(0)
    assert started.is_set() and task.cancelled()


async def test_a_sleeper_wakes_on_its_own_id_only():
    wakeups = Wakeups()
    wakeups.open("a")
    wakeups.open("b")
    sleeper = asyncio.ensure_future(wakeups.sleep("a", 30.0))
    await asyncio.sleep(0)
    wakeups.wake("b")
    wakeups.wake("unknown")
    await asyncio.sleep(0)
    assert not sleeper.done()
    wakeups.wake("a")
    await asyncio.wait_for(sleeper, 1.0)
    wakeups.wake("a")  # nobody sleeps on it now: a no-op, and the next sleep still waits
    second = asyncio.ensure_future(wakeups.sleep("a", 30.0))
    await asyncio.sleep(0)
    assert not second.done()
    wakeups.close("a")
    second.cancel()


async def test_a_sleep_ends_at_its_time_limit_and_leaves_no_timer():
    wakeups = Wakeups()
    wakeups.open("a")
    loop = asyncio.get_running_loop()
    started = loop.time()
    await wakeups.sleep("a", 0.02)
    assert loop.time() - started >= 0.015
    woken = asyncio.ensure_future(wakeups.sleep("a", 30.0))
    await asyncio.sleep(0)
    wakeups.wake("a")
    await woken
    timers = [h for h in loop._scheduled if not h.cancelled()]
    assert not any(h.when() > loop.time() + 10 for h in timers)  # the 30 s timer went


async def test_a_cancel_racing_a_wake_is_not_swallowed():
    wakeups = Wakeups()
    wakeups.open("a")
    sleeper = asyncio.ensure_future(wakeups.sleep("a", 30.0))
    await asyncio.sleep(0)
    wakeups.wake("a")  # the wake and the cancel land in the same loop iteration
    sleeper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sleeper
