"""The background feed of `llmd top`: subscribe to stats, keep the latest, reconnect on loss.

Only the newest snapshot is kept and the app is told once until it takes it, so a slow
screen skips snapshots instead of queueing them; the daemon itself schedules each next
snapshot after the previous one was sent, so polls never pile up on either side.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from textual.message import Message

from llmd.protocol import StatsSnapshot
from llmd.protocol.client_messages import MIN_SUBSCRIBE_INTERVAL_MS
from llmd.tui.backoff import Backoff
from llmd.tui.top.events import FeedLive, FeedLost, SnapshotReady

MAX_TABLE_ROWS = 64
"""Requests per snapshot; more than a screen shows."""


class LatestSlot:
    """Holds only the newest snapshot."""

    def __init__(self) -> None:
        self._snapshot: StatsSnapshot | None = None

    def put(self, snapshot: StatsSnapshot) -> bool:
        """Store `snapshot` (replacing an untaken one); True when the slot was empty."""
        was_empty = self._snapshot is None
        self._snapshot = snapshot
        return was_empty

    def take(self) -> StatsSnapshot | None:
        """The newest snapshot, emptying the slot (None when nothing new arrived)."""
        snapshot, self._snapshot = self._snapshot, None
        return snapshot


class SnapshotFeed:
    """Runs in a worker: subscribes through a fresh client per connection attempt."""

    def __init__(
        self,
        client_factory: Callable[[], Any],
        interval_s: float,
        post: Callable[[Message], Any],
        backoff: Backoff | None = None,
    ) -> None:
        self._client_factory = client_factory
        self.interval_ms = max(MIN_SUBSCRIBE_INTERVAL_MS, min(60_000, round(interval_s * 1000)))
        self._post = post
        self.backoff = backoff or Backoff()
        self.slot = LatestSlot()
        self.timeline_request_id: str | None = None
        """Engine request id whose timeline to ask for (set by the app)."""
        self._is_live = False

    async def run(self) -> None:
        """Forever: connect, stream snapshots, and on failure wait with backoff and retry."""
        while True:
            client = self._client_factory()
            try:
                await self._stream(client)
            except Exception as error:  # the daemon went away or refused us
                delay = self.backoff.next_delay()
                self._is_live = False
                code = getattr(error, "code", None)
                message = f"{code}: {error}" if code else str(error) or type(error).__name__
                self._post(FeedLost(message, delay, self.backoff.num_failures))
            else:
                delay = self.backoff.next_delay()  # the stream ended without an error
            finally:
                with contextlib.suppress(Exception):
                    await client.close()
            await asyncio.sleep(delay)

    async def _stream(self, client: Any) -> None:
        """Subscribe, and subscribe again whenever the selected timeline changes."""
        while True:
            timeline_request_id = self.timeline_request_id
            snapshots = client.subscribe(
                self.interval_ms,
                timeline_request_id=timeline_request_id,
                max_requests=MAX_TABLE_ROWS,
            )
            async with contextlib.aclosing(snapshots) as stream:
                async for snapshot in stream:
                    self._on_snapshot(snapshot)
                    if self.timeline_request_id != timeline_request_id:
                        break
                else:
                    return

    def _on_snapshot(self, snapshot: StatsSnapshot) -> None:
        if not self._is_live:
            self._is_live = True
            self.backoff.reset()
            self._post(FeedLive())
        if self.slot.put(snapshot):
            self._post(SnapshotReady())
