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

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from llmd.daemon.engine_commands import SnapshotCommand
from llmd.daemon.engine_loop import EngineLoop
from llmd.daemon.engine_state import block_map
from llmd.daemon.outbox import Outbox, SnapshotReady
from llmd.daemon.routes import RouteTable
from llmd.engine.engine_snapshot import EngineSnapshot
from llmd.errors import OverloadedError
from llmd.metrics import ServingMetrics
from llmd.protocol import StatsRequest, SubscribeRequest, pack_stats_reply, pack_value
from llmd.protocol.engine_sections import BlockMap, RequestRow, RequestTimeline
from llmd.protocol.stats_snapshot import DaemonSection, StatsSnapshot

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


@dataclass(frozen=True)
class SnapshotParts:
    """The optional sections of one collection, built once for every view of it."""

    timelines: dict[str, RequestTimeline | None]
    requests: tuple[RequestRow, ...] | None
    recent: tuple[RequestRow, ...] | None
    num_requests: int | None
    block_map: BlockMap | None


@dataclass(eq=False)
class StatsPublisher:
    """Answers stats requests and runs subscriptions; used by the I/O thread only."""

    engine_loop: EngineLoop
    outbox: Outbox
    """Where the engine thread posts its part of a collection."""
    routes: RouteTable
    """Client ids of the engine's request ids, for the request table's rows."""
    metrics: ServingMetrics
    daemon_facts: Callable[[], DaemonSection]
    send: Callable[[bytes, bytes], None]
    """Sends packed bytes to a peer."""
    subscriptions: dict[tuple[bytes, str], Subscription] = field(default_factory=dict)
    num_collections: int = 0
    """Engine-state collections asked for since start."""
    _waiting: list[Waiter] = field(default_factory=list, init=False)
    """Waiters for the next collection."""
    _collecting: list[Waiter] | None = field(default=None, init=False)
    """Waiters of the collection in flight (None when none is)."""

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
        if self.engine_loop.dead_error is not None or not self.engine_loop.is_alive:
            self.on_ready(SnapshotReady(None))
            return
        requests = [w.request for w in waiters]
        timeline_ids = sorted(
            {r.timeline_request_id for r in requests if r.timeline_request_id is not None}
        )
        outbox = self.outbox

        def on_ready(engine_snapshot: EngineSnapshot | None) -> None:  # in the engine thread
            outbox.post(SnapshotReady(engine_snapshot))

        self.num_collections += 1
        self.engine_loop.submit(
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
        base, parts = self._split(item.engine_snapshot)
        packed: dict[tuple[bool, bool, str | None, int], bytes] = {}
        for waiter in waiters:
            if waiter.is_subscription:
                subscription = self.subscriptions.get((waiter.peer, waiter.request.id))
                if subscription is None:
                    continue  # unsubscribed meanwhile
                subscription.is_pending = False
            key = waiter.view_key
            if key not in packed:
                packed[key] = pack_value(self._view(base, parts, key).to_wire())
            self.send(waiter.peer, pack_stats_reply(waiter.request.id, packed[key]))
        self._collect()

    def answer_pending(self) -> None:
        """The engine died: answer what it never will, without its part."""
        if self._collecting is not None:
            self.on_ready(SnapshotReady(None))

    def _split(self, engine: EngineSnapshot | None) -> tuple[StatsSnapshot, SnapshotParts]:
        """The part every snapshot shares, and the optional parts, built once."""
        base = StatsSnapshot.of(
            time.time(),
            self.daemon_facts(),
            self.metrics.snapshot(),
            queue=None if engine is None else engine.queue,
            kv=None if engine is None else engine.kv,
            grammar=None if engine is None else engine.grammar,
        )
        if engine is not None and engine.moe is not None:
            base = dataclasses.replace(base, moe=engine.moe)
        if engine is None:
            return base, SnapshotParts({}, None, None, None, None)
        requests = engine.requests
        if requests is not None:
            requests = tuple(
                dataclasses.replace(row, client_id=self._client_id(row.request_id))
                for row in requests
            )
        parts = SnapshotParts(
            timelines=dict(engine.timelines),
            requests=requests,
            recent=engine.recent,
            num_requests=engine.num_requests if requests is not None else None,
            block_map=None if engine.block_map is None else block_map(engine.block_map),
        )
        return base, parts

    def _client_id(self, request_id: str) -> str | None:
        key = self.routes.key_of(request_id)
        return None if key is None else key[1]

    @staticmethod
    def _view(
        base: StatsSnapshot, parts: SnapshotParts, key: tuple[bool, bool, str | None, int]
    ) -> StatsSnapshot:
        include_requests, include_block_map, timeline_request_id, max_requests = key
        changes: dict[str, object] = {}
        if include_requests and parts.requests is not None:
            changes["requests"] = parts.requests[:max_requests]
            changes["num_requests"] = parts.num_requests
            changes["recent"] = (parts.recent or ())[:max_requests]  # set with "requests"
        if timeline_request_id is not None:
            changes["timeline"] = parts.timelines.get(timeline_request_id)
        if include_block_map:
            changes["block_map"] = parts.block_map
        return dataclasses.replace(base, **changes)  # type: ignore[arg-type]

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
