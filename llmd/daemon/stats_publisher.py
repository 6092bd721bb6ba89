"""Stats for the I/O thread: one-shot snapshots and periodic subscriptions.

The engine's part of a snapshot is collected by the engine thread between steps and
comes back through the outbox; here it is merged with the daemon's facts and metrics,
and each subscription asks for its next snapshot only once the previous one was sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmd.daemon.engine_loop import EngineLoop, SnapshotCommand
from llmd.daemon.outbox import Outbox, SnapshotReady
from llmd.daemon.routes import RouteTable
from llmd.protocol import StatsReply, StatsRequest, SubscribeRequest, WireMessage


@dataclass
class Subscription:
    """A peer's periodic stats stream."""

    request: SubscribeRequest
    next_due: float
    is_pending: bool = False


class StatsPublisher:
    """Answers stats requests and runs subscriptions; used by the I/O thread only."""

    def __init__(
        self,
        engine_loop: EngineLoop,
        outbox: Outbox,
        routes: RouteTable,
        metrics: Any,
        daemon_facts: Callable[[], dict[str, Any]],
        send: Callable[[bytes, WireMessage], None],
    ) -> None:
        self._engine_loop = engine_loop
        self._outbox = outbox
        self._routes = routes
        self._metrics = metrics
        self._daemon_facts = daemon_facts
        self._send = send
        self.subscriptions: dict[tuple[bytes, str], Subscription] = {}
        self._pending: dict[tuple[bytes, str, bool], None] = {}
        """Requests whose engine part has not come back yet."""

    def subscribe(self, peer: bytes, request: SubscribeRequest) -> None:
        """Start (or replace) a subscription; the first snapshot goes out at once."""
        self.subscriptions[(peer, request.id)] = Subscription(request, next_due=time.monotonic())

    def unsubscribe(self, peer: bytes, subscription_id: str) -> None:
        """End a subscription (unknown ids are ignored)."""
        self.subscriptions.pop((peer, subscription_id), None)

    def knows(self, peer: bytes, client_id: str) -> bool:
        """True while `client_id` is a live subscription or an unanswered stats request."""
        return (peer, client_id) in self.subscriptions or (peer, client_id, False) in self._pending

    def peers(self) -> set[bytes]:
        """Every peer with a subscription."""
        return {peer for peer, _ in self.subscriptions}

    def drop_peer(self, peer: bytes) -> None:
        """End every subscription of a peer that went away."""
        for key in [key for key in self.subscriptions if key[0] == peer]:
            del self.subscriptions[key]

    def request(self, peer: bytes, request: StatsRequest, is_subscription: bool = False) -> None:
        """Ask the engine thread for its state; the reply is sent when it comes back."""
        if self._engine_loop.dead_error is not None or not self._engine_loop.is_alive:
            self.on_ready(SnapshotReady(peer, request.id, {}, is_subscription))
            return
        self._pending[(peer, request.id, is_subscription)] = None

        def on_ready(engine_state: dict[str, Any]) -> None:  # runs in the engine thread
            self._outbox.post(SnapshotReady(peer, request.id, engine_state, is_subscription))

        self._engine_loop.submit(
            SnapshotCommand(
                on_ready,
                request.include_requests,
                request.include_block_map,
                request.timeline_request_id,
                request.max_requests,
            )
        )

    def on_ready(self, item: SnapshotReady) -> None:
        """Send a snapshot whose engine part has arrived."""
        self._pending.pop((item.peer, item.client_id, item.is_subscription), None)
        if item.is_subscription:
            subscription = self.subscriptions.get((item.peer, item.client_id))
            if subscription is None:
                return  # unsubscribed meanwhile
            subscription.is_pending = False
        self._send(item.peer, StatsReply(item.client_id, self.snapshot(item.engine_state)))

    def answer_pending(self) -> None:
        """The engine died: answer what it never will, without its part."""
        for peer, client_id, is_subscription in list(self._pending):
            self.on_ready(SnapshotReady(peer, client_id, {}, is_subscription))

    def snapshot(self, engine_state: dict[str, Any]) -> dict[str, Any]:
        """A full snapshot: daemon facts, metrics and the engine's state."""
        snapshot: dict[str, Any] = {
            "time": time.time(),
            "daemon": self._daemon_facts(),
            **self._metrics.snapshot(),
            **engine_state,
        }
        for row in snapshot.get("requests", ()):
            key = self._routes.key_of(row["request_id"])
            row["client_id"] = None if key is None else key[1]
        return snapshot

    def run_due(self) -> None:
        """Request the next snapshot of every subscription that is due."""
        now = time.monotonic()
        for (peer, _), subscription in list(self.subscriptions.items()):
            if subscription.is_pending or now < subscription.next_due:
                continue
            subscription.is_pending = True
            subscription.next_due = now + subscription.request.interval_ms / 1000
            self.request(peer, subscription.request.stats_request(), is_subscription=True)

    def poll_timeout_ms(self, longest_ms: int) -> int:
        """How long the I/O thread may sleep before a subscription is due."""
        timeout = longest_ms
        now = time.monotonic()
        for subscription in self.subscriptions.values():
            if not subscription.is_pending:
                wait_ms = int((subscription.next_due - now) * 1000)
                timeout = min(timeout, max(0, wait_ms))
        return timeout
