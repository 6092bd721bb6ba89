"""Sums and per-second rates over a sliding window, in fixed time buckets.

Tokens per second are recorded every step (hundreds of times a second); per-second
buckets keep memory constant however busy the engine is, at one bucket's resolution.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable


class RateMeter:
    """Amounts added over the last `window_s` seconds, kept in `bucket_s` buckets."""

    def __init__(
        self,
        window_s: float = 60.0,
        bucket_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if window_s <= 0 or bucket_s <= 0 or bucket_s > window_s:
            raise ValueError("need 0 < bucket_s <= window_s")
        self.window_s = window_s
        self.bucket_s = bucket_s
        self._clock = clock
        self._started = clock()
        self._buckets: deque[list[float]] = deque()  # [bucket index, amount]
        self.lifetime_total = 0.0
        """Everything ever added, window or not."""

    def add(self, amount: float = 1.0, now: float | None = None) -> None:
        """Add `amount` at time `now`."""
        now = self._clock() if now is None else now
        index = math.floor(now / self.bucket_s)
        if self._buckets and self._buckets[-1][0] == index:
            self._buckets[-1][1] += amount
        else:
            self._buckets.append([index, amount])
        self.lifetime_total += amount
        self._expire(now)

    def total(self, now: float | None = None) -> float:
        """Sum of the amounts inside the window."""
        self._expire(self._clock() if now is None else now)
        return sum(amount for _, amount in self._buckets)

    def rate(self, now: float | None = None) -> float:
        """Amount per second over the window (or since creation, if that is shorter)."""
        now = self._clock() if now is None else now
        span = min(self.window_s, now - self._started)
        if span <= 0:
            return 0.0
        return self.total(now) / span

    def _expire(self, now: float) -> None:
        oldest_index = math.floor((now - self.window_s) / self.bucket_s)
        while self._buckets and self._buckets[0][0] <= oldest_index:
            self._buckets.popleft()
