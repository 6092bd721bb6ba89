"""Messages the snapshot feed posts to the top app; the app's handlers change the state."""

from __future__ import annotations

from textual.message import Message


class SnapshotReady(Message):
    """A new snapshot is waiting in the feed's slot (posted once until it is taken)."""


class FeedLive(Message):
    """Snapshots are flowing (after the first connect or a reconnect)."""


class FeedLost(Message):
    """The daemon went away; the feed retries in `retry_in_s`."""

    def __init__(self, message: str, retry_in_s: float, num_attempts: int) -> None:
        super().__init__()
        self.message = message
        self.retry_in_s = retry_in_s
        self.num_attempts = num_attempts
