"""A histogram over a sliding window: the last `window_s` seconds, at most `max_samples`.

Serving latencies drift with load, so `llmd top` shows percentiles of what happened
recently rather than since start; samples older than the window simply fall out.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence

from llmd.protocol.metrics_sections import WindowSummary

SUMMARY_PERCENTILES = (50, 90, 99)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted values, linearly interpolated between ranks."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    position = q / 100 * (len(sorted_values) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(sorted_values) - 1)
    fraction = position - lower
    return sorted_values[lower] + (sorted_values[upper] - sorted_values[lower]) * fraction


class SlidingHistogram:
    """Samples of the last `window_s` seconds (the newest `max_samples` of them)."""

    def __init__(
        self,
        window_s: float = 60.0,
        max_samples: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if window_s <= 0 or max_samples <= 0:
            raise ValueError("window_s and max_samples must be positive")
        self.window_s = window_s
        self._clock = clock
        self._samples: deque[tuple[float, float]] = deque(maxlen=max_samples)

    def add(self, value: float, now: float | None = None) -> None:
        """Record one sample at time `now` (the clock's time by default)."""
        now = self._clock() if now is None else now
        self._samples.append((now, float(value)))
        self._expire(now)

    def values(self, now: float | None = None) -> list[float]:
        """The samples still inside the window, oldest first."""
        self._expire(self._clock() if now is None else now)
        return [value for _, value in self._samples]

    def summary(self, now: float | None = None) -> WindowSummary:
        """count, mean, p50, p90, p99 and max of the window (None when it is empty)."""
        values = sorted(self.values(now))
        if not values:
            return WindowSummary()
        p50, p90, p99 = (percentile(values, q) for q in SUMMARY_PERCENTILES)
        return WindowSummary(len(values), sum(values) / len(values), p50, p90, p99, values[-1])

    def _expire(self, now: float) -> None:
        horizon = now - self.window_s
        samples = self._samples
        while samples and samples[0][0] < horizon:
            samples.popleft()
