"""When to send each busy connection a keepalive, so that a vanished client is noticed.

The ROUTER reports a disconnected peer only when a send to it fails; a client whose
requests produce no output (non-streaming, queued, prefilling) would never be sent
anything until its requests finished. So every connection with work in flight is sent
something at least once a second, and at once after any connection closes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

KEEPALIVE_INTERVAL_S = 1.0
"""A connection with work in flight hears from the daemon at least this often."""


class KeepaliveSchedule:
    """Tracks when each busy connection was last sent anything; owned by the I/O thread."""

    def __init__(self) -> None:
        self._last_sent: dict[bytes, float] = {}
        self._next_sweep = time.monotonic() + KEEPALIVE_INTERVAL_S

    def on_sent(self, peer: bytes) -> None:
        """Something was delivered to `peer`."""
        if peer in self._last_sent:
            self._last_sent[peer] = time.monotonic()

    def on_disconnect(self) -> None:
        """Some connection closed: probe every busy one at the next sweep to find whose."""
        self._next_sweep = 0.0
        self._last_sent = dict.fromkeys(self._last_sent, 0.0)

    def due(self, busy_peers: Iterable[bytes]) -> list[bytes]:
        """The busy peers to send a keepalive now (empty between sweeps)."""
        now = time.monotonic()
        if now < self._next_sweep:
            return []
        self._next_sweep = now + KEEPALIVE_INTERVAL_S
        self._last_sent = {peer: self._last_sent.get(peer, 0.0) for peer in busy_peers}
        return [
            peer for peer, sent in self._last_sent.items() if now - sent >= KEEPALIVE_INTERVAL_S
        ]
