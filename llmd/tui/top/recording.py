"""`llmd top --record`: every snapshot top receives, appended to a JSON-lines file.

A recording is what a past incident or a bug report needs to be seen again: each line holds
the wall-clock time the snapshot arrived, the daemon's address and the snapshot's own wire
map, so `--replay` reads it back with the same decoder the client uses.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import IO, Any

from llmd.protocol import StatsSnapshot

RECORD_KEYS = ("time", "address", "snapshot")
"""The keys of one recorded line: Unix seconds, the daemon's address, the wire snapshot."""


class SnapshotRecorder:
    """Appends one line per snapshot and flushes it, so a killed top leaves at most one
    cut line behind (which a replay skips)."""

    def __init__(self, path: Path, wall_clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._wall_clock = wall_clock
        self._file: IO[str] = path.open("w", encoding="utf-8")
        self.num_recorded = 0

    def record(self, address: str, snapshot: StatsSnapshot) -> None:
        """Write `snapshot` as received from `address` now."""
        line = {"time": self._wall_clock(), "address": address, "snapshot": snapshot.to_wire()}
        self._file.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._file.flush()
        self.num_recorded += 1

    def close(self) -> None:
        """Close the file (the lines are already flushed)."""
        self._file.close()


class RecordingClient:
    """A client whose subscriptions record each snapshot before top sees it.

    It wraps whatever the feed would have used (an AsyncClient, a test's fake), so the
    live views need no change to be recorded.
    """

    def __init__(self, client: Any, recorder: SnapshotRecorder, address: str) -> None:
        self.client = client
        self.recorder = recorder
        self.address = address

    async def subscribe(self, interval_ms: int, **options: Any) -> AsyncIterator[StatsSnapshot]:
        """The wrapped client's snapshots, each recorded as it arrives."""
        snapshots = self.client.subscribe(interval_ms, **options)
        try:
            async for snapshot in snapshots:
                self.recorder.record(self.address, snapshot)
                yield snapshot
        finally:
            await snapshots.aclose()

    async def close(self) -> None:
        await self.client.close()
