"""A histogram of every sample since start, in fixed buckets: the Prometheus model.

The sliding histograms answer "how is it now" for `llmd top`; a Prometheus server
computes its own rates and quantiles and needs counts that only ever grow.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from llmd.protocol.metrics_sections import HistogramData

LATENCY_BUCKETS_S = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0,
)  # fmt: skip
"""Upper bounds (seconds) for latency histograms, from a millisecond to ten minutes."""
TOKEN_COUNT_BUCKETS = (
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000,
)  # fmt: skip
"""Upper bounds for prompt and generation length histograms."""
COMPILE_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
"""Upper bounds (seconds) for grammar compile times, from 100 us to the compile limit."""


class BucketHistogram:
    """Per-bucket counts (a value v lands in the first bucket with v <= bound), sum, count."""

    def __init__(self, bounds: Sequence[float]) -> None:
        if not bounds or list(bounds) != sorted(set(bounds)):
            raise ValueError("bounds must be a non-empty increasing sequence")
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        """One count per bound, then the overflow bucket (+Inf); not cumulative."""
        self.sum = 0.0
        self.count = 0

    def add(self, value: float) -> None:
        """Record one sample."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def data(self) -> HistogramData:
        """The snapshot's form: bounds, counts (the last is +Inf), sum and count."""
        return HistogramData(self.bounds, tuple(self.counts), self.sum, self.count)
