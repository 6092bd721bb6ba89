"""Stats for the I/O thread: one-shot snapshots and periodic subscriptions, coalesced.

The engine's part of a snapshot is copied by the engine thread between steps and comes
back through the outbox. However many stats requests and subscriptions are due, at most
one collection is in flight: it covers all of them, the I/O thread builds the rest (block
map, metrics, daemon facts) once, and each distinct set of options is packed once. So
the engine's cost does not grow with the number of subscribers; their number per peer
and in total is capped, and each subscription's next snapshot is asked for only once the
previous one was sent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

from llmd.daemon.engine_commands import SnapshotCommand
from llmd.daemon.engine_loop import EngineLoop
from llmd.daemon.engine_state import EngineState, block_map, row_dicts, timeline_dict
from llmd.daemon.outbox import Outbox, SnapshotReady
from llmd.daemon.routes import RouteTable
from llmd.errors import OverloadedError
from llmd.metrics import ServingMetrics
from llmd.protocol import StatsRequest, SubscribeRequest, pack_stats_reply, pack_value

MAX_SUBSCRIPTIONS_PER_PEER = 64
MAX_SUBSCRIPTIONS = 1024


@dataclass
class Subscription:
    """A peer's periodic stats stream."""

    request: SubscribeRequest
    next_due: float
    is_pending: bool = False


@dataclass(frozen=True)
class Waiter:
    """A stats request or subscription tick waiting for the next collection."""

    peer: bytes
    request: StatsRequest
    is_subscription: bool

    @property
    def view_key(self) -> tuple[bool, bool, str | None, int]:
        """The options that shape its snapshot: waiters with equal keys share one."""
        request = self.request
        return (
            request.include_requests,
            request.include_block_map,
            request.timeline_request_id,
            request.max_requests,
        )


def next_tick(now: float, interval_s: float) -> float:
    """The first multiple of `interval_s` (on the monotonic clock) after `now`.

    Subscriptions with the same interval thus fall due at the same instants and share one
    engine collection and one packed snapshot, instead of each asking at its own phase.
    """
    return (math.floor(now / interval_s) + 1) * interval_s


class SnapshotParts(TypedDict):
    """The optional sections of one collection, as wire maps, built once for every view."""

    timelines: dict[str, dict[str, object] | None]
    requests: list[dict[str, object]] | None
    recent: list[dict[str, object]] | None
    num_requests: int | None
    block_map: dict[str, object] | None


class StatsPublisher:
    """Answers stats requests and runs subscriptions; used by the I/O thread only."""

    def __init__(
        self,
        engine_loop: EngineLoop,
        outbox: Outbox,
        routes: RouteTable,
        metrics: ServingMetrics,
        daemon_facts: Callable[[], dict[str, object]],
        send: Callable[[bytes, bytes], None],
    ) -> None:
        self._engine_loop = engine_loop
        self._outbox = outbox
        self._routes = routes
        self._metrics = metrics
        self._daemon_facts = daemon_facts
        self._send = send
        self.subscriptions: dict[tuple[bytes, str], Subscription] = {}
        self._waiting: list[Waiter] = []
        """Waiters for the next collection."""
        self._collecting: list[Waiter] | None = None
        """Waiters of the collection in flight (None when none is)."""
        self.num_collections = 0
        """Engine-state collections asked for since start."""

    def subscribe(self, peer: bytes, request: SubscribeRequest) -> None:
        """Start (or replace) a subscription; the first snapshot goes out at once."""
        key = (peer, request.id)
        if key not in self.subscriptions:
            num_of_peer = sum(1 for other, _ in self.subscriptions if other == peer)
            if num_of_peer >= MAX_SUBSCRIPTIONS_PER_PEER:
                raise OverloadedError(
                    f"this connection has {num_of_peer} subscriptions, the most allowed; "
                    "unsubscribe one first"
                )
            if len(self.subscriptions) >= MAX_SUBSCRIPTIONS:
                raise OverloadedError(
                    f"the daemon has {len(self.subscriptions)} subscriptions, the most "
                    "allowed; retry later"
                )
        self.subscriptions[key] = Subscription(request, next_due=time.monotonic())

    def unsubscribe(self, peer: bytes, subscription_id: str) -> None:
        """End a subscription (unknown ids are ignored)."""
        self.subscriptions.pop((peer, subscription_id), None)

    def drop_peer(self, peer: bytes) -> None:
        """End every subscription of a peer that went away."""
        for key in [key for key in self.subscriptions if key[0] == peer]:
            del self.subscriptions[key]

    def knows(self, peer: bytes, client_id: str) -> bool:
        """True while `client_id` is a live subscription or an unanswered stats request."""
        if (peer, client_id) in self.subscriptions:
            return True
        waiters = self._waiting + (self._collecting or [])
        return any(w.peer == peer and w.request.id == client_id for w in waiters)

    def peers(self) -> set[bytes]:
        """Every peer with a subscription."""
        return {peer for peer, _ in self.subscriptions}

    def request(self, peer: bytes, request: StatsRequest, is_subscription: bool = False) -> None:
        """Answer with the next collection of the engine's state."""
        self._waiting.append(Waiter(peer, request, is_subscription))
        self._collect()

    def _collect(self) -> None:
        """Ask the engine for one collection covering every waiter, unless one is in flight."""
        if self._collecting is not None or not self._waiting:
            return
        waiters, self._waiting = self._waiting, []
        self._collecting = waiters
        if self._engine_loop.dead_error is not None or not self._engine_loop.is_alive:
            self.on_ready(SnapshotReady(b"", "", {}, False))
            return
        requests = [w.request for w in waiters]
        timeline_ids = sorted(
            {r.timeline_request_id for r in requests if r.timeline_request_id is not None}
        )
        outbox = self._outbox

        def on_ready(engine_state: EngineState) -> None:  # runs in the engine thread
            outbox.post(SnapshotReady(b"", "", engine_state, False))

        self.num_collections += 1
        self._engine_loop.submit(
            SnapshotCommand(
                on_ready,
                any(r.include_requests for r in requests),
                any(r.include_block_map for r in requests),
                tuple(timeline_ids),
                max(r.max_requests for r in requests),
            )
        )

    def on_ready(self, item: SnapshotReady) -> None:
        """The collection came back: answer each of its waiters, then start the next one."""
        waiters, self._collecting = self._collecting or [], None
        base, parts = self._split(item.engine_state)
        packed: dict[tuple[bool, bool, str | None, int], bytes] = {}
        for waiter in waiters:
            if waiter.is_subscription:
                subscription = self.subscriptions.get((waiter.peer, waiter.request.id))
                if subscription is None:
                    continue  # unsubscribed meanwhile
                subscription.is_pending = False
            key = waiter.view_key
            if key not in packed:
                packed[key] = pack_value(self._view(base, parts, key))
            self._send(waiter.peer, pack_stats_reply(waiter.request.id, packed[key]))
        self._collect()

    def answer_pending(self) -> None:
        """The engine died: answer what it never will, without its part."""
        if self._collecting is not None:
            self.on_ready(SnapshotReady(b"", "", {}, False))

    def _split(self, engine_state: EngineState) -> tuple[dict[str, object], SnapshotParts]:
        """The part every snapshot shares, and the optional parts, built once."""
        engine_state = engine_state.copy()
        timelines = engine_state.pop("timelines", {})
        requests = engine_state.pop("requests", None)
        copy = engine_state.pop("block_map_copy", None)
        parts: SnapshotParts = {
            "timelines": {key: timeline_dict(value) for key, value in timelines.items()},
            "requests": row_dicts(requests),
            "recent": row_dicts(engine_state.pop("recent", None)),
            "num_requests": engine_state.pop("num_requests", None),
            "block_map": None if copy is None else block_map(copy),
        }
        for row, request in zip(parts["requests"] or (), requests or ()):
            key = self._routes.key_of(request.request_id)
            row["client_id"] = None if key is None else key[1]
        for row in parts["recent"] or ():
            row["client_id"] = None
        base: dict[str, object] = {
            "time": time.time(),
            "daemon": self._daemon_facts(),
            **self._metrics.snapshot(),
            **engine_state,
        }
        return base, parts

    @staticmethod
    def _view(
        base: dict[str, object], parts: SnapshotParts, key: tuple[bool, bool, str | None, int]
    ) -> dict[str, object]:
        include_requests, include_block_map, timeline_request_id, max_requests = key
        snapshot = dict(base)
        if include_requests and parts["requests"] is not None:
            snapshot["requests"] = parts["requests"][:max_requests]
            snapshot["num_requests"] = parts["num_requests"]
            snapshot["recent"] = (parts["recent"] or [])[:max_requests]  # set with "requests"
        if timeline_request_id is not None and "queue" in base:
            snapshot["timeline"] = parts["timelines"].get(timeline_request_id)
        if include_block_map and parts["block_map"] is not None:
            snapshot["block_map"] = parts["block_map"]
        return snapshot

    def run_due(self) -> None:
        """Queue the next snapshot of every subscription that is due."""
        now = time.monotonic()
        for (peer, _), subscription in list(self.subscriptions.items()):
            if subscription.is_pending or now < subscription.next_due:
                continue
            subscription.is_pending = True
            subscription.next_due = next_tick(now, subscription.request.interval_ms / 1000)
            self._waiting.append(Waiter(peer, subscription.request.stats_request(), True))
        self._collect()

    def poll_timeout_ms(self, longest_ms: int) -> int:
        """How long the I/O thread may sleep before a subscription is due."""
        timeout = longest_ms
        now = time.monotonic()
        for subscription in self.subscriptions.values():
            if not subscription.is_pending:
                wait_ms = int((subscription.next_due - now) * 1000)
                timeout = min(timeout, max(0, wait_ms))
        return timeout
