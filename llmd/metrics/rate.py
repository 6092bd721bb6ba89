"""Sums and per-second rates over a sliding window, in fixed time buckets.

Tokens per second are recorded every step (hundreds of times a second); per-second
buckets keep memory constant however busy the engine is, at one bucket's resolution.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(eq=False, repr=False)
class RateMeter:
    """Amounts added over the last `window_s` seconds, kept in `bucket_s` buckets."""

    window_s: float = 60.0
    bucket_s: float = 1.0
    clock: Callable[[], float] = time.monotonic
    """Where `now` comes from when a call does not give it."""
    lifetime_total: float = field(default=0.0, init=False)
    """Everything ever added, window or not."""
    _started: float = field(init=False)
    _buckets: deque[list[float]] = field(default_factory=deque, init=False)
    """[bucket index, amount] pairs, oldest first."""

    def __post_init__(self) -> None:
        if self.window_s <= 0 or self.bucket_s <= 0 or self.bucket_s > self.window_s:
            raise ValueError("need 0 < bucket_s <= window_s")
        self._started = self.clock()

    def add(self, amount: float = 1.0, now: float | None = None) -> None:
        """Add `amount` at time `now`."""
        now = self.clock() if now is None else now
        index = math.floor(now / self.bucket_s)
        if self._buckets and self._buckets[-1][0] == index:
            self._buckets[-1][1] += amount
        else:
            self._buckets.append([index, amount])
        self.lifetime_total += amount
        self._expire(now)

    def total(self, now: float | None = None) -> float:
        """Sum of the amounts inside the window."""
        self._expire(self.clock() if now is None else now)
        return sum(amount for _, amount in self._buckets)

    def rate(self, now: float | None = None) -> float:
        """Amount per second over the window (or since creation, if that is shorter)."""
        now = self.clock() if now is None else now
        span = min(self.window_s, now - self._started)
        if span <= 0:
            return 0.0
        return self.total(now) / span

    def _expire(self, now: float) -> None:
        oldest_index = math.floor((now - self.window_s) / self.bucket_s)
        while self._buckets and self._buckets[0][0] <= oldest_index:
            self._buckets.popleft()
