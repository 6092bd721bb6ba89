"""Crash and restart: kill -9 under streaming load, restart at once or after a pause.

Every stream's client must be told (a typed error) within its own timeout of the kill,
none may hang, and the new daemon must execute nothing from the dead run: neither the
old streams nor a request a long-lived client sent while no daemon was running.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from typing import Any

from llmd.client import AsyncClient, TokenDelta
from llmd.errors import LLMDError
from scripts.soak_suite.daemon_process import DaemonProcess
from scripts.soak_suite.result import ScenarioResult
from scripts.soak_suite.streams import prompt_for

TOLD_SLACK_S = 1.0
"""Scheduling slack on a loaded 2-core machine on top of the client's timeout."""
SETTLE_S = 2.0
"""How long the new daemon is left alone before its totals are read."""
HANG_MARGIN_S = 10.0
"""A stream not told by its timeout plus this margin counts as hung (lost)."""


def run_crash(
    daemon: DaemonProcess,
    num_kills: int = 20,
    num_streams: int = 32,
    at_once_timeout_s: float = 60.0,
    paused_timeout_s: float = 5.0,
    downtime_timeout_s: float = 3.0,
    pause_s: float = 2.0,
) -> ScenarioResult:
    """`num_kills` rounds of kill -9 under `num_streams` streams, alternating two kinds.

    Even rounds restart at once, with stream clients whose timeout (`at_once_timeout_s`)
    outlasts the restart, so only noticing the new instance can tell them; odd rounds
    restart after `pause_s` with clients that time out (`paused_timeout_s`) while no
    daemon runs. In both, a long-lived client sends a request while the daemon is down
    and gives up after `downtime_timeout_s`; the new daemon must never run it.
    """
    result = ScenarioResult("crash_restart")
    outcomes: Counter = Counter()
    told_s: list[float] = []
    executed: list[dict[str, Any]] = []
    downtime: Counter = Counter()
    restart_s: list[float] = []
    num_slow_restarts = 0
    num_sent = 0
    for round_index in range(num_kills):
        is_at_once = round_index % 2 == 0
        timeout_s = at_once_timeout_s if is_at_once else paused_timeout_s
        summary = asyncio.run(
            _round(
                daemon, num_streams, timeout_s, downtime_timeout_s, 0.0 if is_at_once else pause_s
            )
        )
        num_sent += num_streams
        outcomes.update(summary["outcomes"])
        told_s += summary["told_s"]
        downtime.update(summary["downtime"])
        restart_s.append(summary["restart_s"])
        if is_at_once and summary["restart_s"] >= at_once_timeout_s:
            num_slow_restarts += 1
        if summary["executed"]:
            executed.append({"round": round_index, **summary["executed"]})
    result.counts.update(
        {
            "num_kills": num_kills,
            "num_streams_per_kill": num_streams,
            "num_streams": num_sent,
            "at_once_timeout_s": at_once_timeout_s,
            "paused_timeout_s": paused_timeout_s,
            "downtime_timeout_s": downtime_timeout_s,
            "pause_s": pause_s,
            "outcomes": dict(outcomes),
            "told_max_s": round(max(told_s), 3) if told_s else None,
            "restart_s_max": round(max(restart_s), 2) if restart_s else None,
            "downtime_requests": dict(downtime),
            "rounds_where_new_daemon_ran_old_requests": executed,
            "num_daemon_starts": daemon.num_starts,
        }
    )
    result.check(
        f"every stream told within its timeout (+{TOLD_SLACK_S:g}s)",
        outcomes["told"] == num_sent,
        f"{dict(outcomes)}",
    )
    result.check("0 streams lost (hung)", outcomes["hung"] == 0, f"{outcomes['hung']} hung")
    result.check(
        "restarts at once beat the clients' timeout (else the round tests nothing)",
        num_slow_restarts == 0,
        f"{num_slow_restarts} restarts took longer than {at_once_timeout_s:g}s",
    )
    result.check(
        "a request sent while down is refused within its timeout; the client then recovers",
        downtime["told"] == num_kills and downtime["recovered"] == num_kills,
        f"{dict(downtime)}",
    )
    result.check(
        "0 requests from the dead run executed by the new daemon",
        not executed,
        f"{executed[:3]}",
    )
    return result.finish()


async def _round(
    daemon: DaemonProcess,
    num_streams: int,
    timeout_s: float,
    downtime_timeout_s: float,
    pause_s: float,
) -> dict[str, Any]:
    """One kill: streams running, kill -9, a request while down, restart, check the new daemon."""
    loop = asyncio.get_running_loop()
    clients = [AsyncClient(daemon.address, timeout_s) for _ in range(num_streams)]
    survivor = AsyncClient(daemon.address, downtime_timeout_s)  # a chat-like client
    await survivor.health()  # it has talked to the daemon that is about to die
    has_token = [asyncio.Event() for _ in range(num_streams)]
    killed_at: list[float] = []
    params = {"max_tokens": 200, "ignore_eos": True, "temperature": 0}

    async def stream(index: int) -> tuple[str, float | None]:
        try:
            events = clients[index].stream(prompt_for(index), params=params)
            async with contextlib.aclosing(events) as s:
                async for event in s:
                    if isinstance(event, TokenDelta):
                        has_token[index].set()
            return "finished", None
        except LLMDError:
            has_token[index].set()
            took = time.monotonic() - killed_at[0] if killed_at else None
            is_in_time = took is not None and took <= timeout_s + TOLD_SLACK_S
            return ("told" if is_in_time else "told_late"), took

    tasks = [asyncio.ensure_future(stream(i)) for i in range(num_streams)]
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in has_token)), 60)
    killed_at.append(time.monotonic())
    daemon.kill9()
    restart: asyncio.Future | None = None
    if pause_s == 0:
        restart = loop.run_in_executor(None, daemon.start)
    downtime = await _downtime_request(survivor, downtime_timeout_s)
    if restart is None:
        await asyncio.sleep(max(0.0, killed_at[0] + pause_s - time.monotonic()))
        restart = loop.run_in_executor(None, daemon.start)
    await restart
    restart_s = time.monotonic() - killed_at[0]
    hang_limit_s = killed_at[0] + timeout_s + HANG_MARGIN_S - time.monotonic()
    await asyncio.wait(tasks, timeout=max(0.0, hang_limit_s))
    results = [task.result() if task.done() else ("hung", None) for task in tasks]
    for task in tasks:
        task.cancel()  # a hung stream's close sends its abort (to a daemon that never knew it)
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(SETTLE_S)
    snapshot = daemon.stats()
    totals = snapshot.totals
    num_finished = sum(totals.finished.values())
    executed = {}
    if totals.prompt_tokens or num_finished or snapshot.daemon.num_in_flight:
        executed = {
            "prompt_tokens": totals.prompt_tokens,
            "finished": totals.finished,
            "in_flight": snapshot.daemon.num_in_flight,
        }
    try:
        completion = await asyncio.wait_for(
            survivor.generate("Hello", params={"max_tokens": 2}), 30
        )
        downtime["recovered"] = int(len(completion.token_ids) == 2)
    except (LLMDError, asyncio.TimeoutError):
        downtime["recovered"] = 0
    for client in [*clients, survivor]:
        await client.close()
    return {
        "outcomes": Counter(outcome for outcome, _ in results),
        "told_s": [took for outcome, took in results if took is not None],
        "downtime": downtime,
        "executed": executed,
        "restart_s": restart_s,
    }


async def _downtime_request(client: AsyncClient, timeout_s: float) -> Counter:
    """Send while no daemon runs: the client must raise a typed error within its timeout."""
    started = time.monotonic()
    tally: Counter = Counter()
    try:
        await asyncio.wait_for(
            client.generate("Hello while down", params={"max_tokens": 4}), 3 * timeout_s
        )
        tally["served"] += 1
    except LLMDError:
        is_in_time = time.monotonic() - started <= timeout_s + TOLD_SLACK_S
        tally["told" if is_in_time else "told_late"] += 1
    except asyncio.TimeoutError:
        tally["hung"] += 1
    return tally
