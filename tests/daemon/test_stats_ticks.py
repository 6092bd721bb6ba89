"""Subscriptions with one interval fall due together, so one collection serves them all."""

from __future__ import annotations

import llmd.daemon.stats_publisher as publisher_module
from llmd.daemon.stats_publisher import StatsPublisher, next_tick
from llmd.protocol import SubscribeRequest


class FakeEngineLoop:
    dead_error = None
    is_alive = True

    def __init__(self) -> None:
        self.commands: list = []

    def submit(self, command) -> None:
        self.commands.append(command)


def test_next_tick_is_the_next_multiple_of_the_interval():
    assert abs(next_tick(10.01, 0.05) - 10.05) < 1e-9
    assert abs(next_tick(10.05, 0.05) - 10.10) < 1e-9
    assert next_tick(3.0, 1.0) == 4.0


def test_subscriptions_started_at_different_phases_share_collections(monkeypatch):
    clock = [100.003]
    monkeypatch.setattr(publisher_module.time, "monotonic", lambda: clock[0])
    engine_loop = FakeEngineLoop()
    sent: list[tuple[bytes, bytes]] = []
    publisher = StatsPublisher(
        engine_loop, outbox=None, routes=None, metrics=None, daemon_facts=dict,
        send=lambda peer, data: sent.append((peer, data)),
    )  # fmt: skip
    for index, peer in enumerate([b"a", b"b", b"c"]):
        clock[0] = 100.003 + 0.011 * index  # each subscribes at its own phase
        publisher.subscribe(peer, SubscribeRequest(id=f"s{index}", interval_ms=100))
    subscriptions = list(publisher.subscriptions.values())
    # The first one is answered and rescheduled at 100.03; the others, still pending then
    # (their snapshot was slower), are rescheduled at 100.041: at another phase before.
    subscriptions[1].is_pending = subscriptions[2].is_pending = True
    clock[0] = 100.03
    publisher.run_due()
    publisher._collecting = None
    subscriptions[1].is_pending = subscriptions[2].is_pending = False
    subscriptions[0].is_pending = True
    clock[0] = 100.041
    publisher.run_due()
    publisher._collecting = None
    for subscription in subscriptions:
        subscription.is_pending = False
    due = {subscription.next_due for subscription in subscriptions}
    assert len(due) == 1  # the same tick for all three
    clock[0] = due.pop()
    before = len(engine_loop.commands)
    publisher.run_due()
    assert len(engine_loop.commands) == before + 1  # one collection serves every subscription
