"""Sliding-window histograms: exact percentiles, expiry by time and by count."""

from __future__ import annotations

import random

import pytest

from llmd.metrics import SlidingHistogram, percentile


class FakeClock:
    """A settable monotonic clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_percentile_interpolates_between_ranks():
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 3.0
    assert percentile(values, 100) == 5.0
    assert percentile(values, 90) == pytest.approx(4.6)
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_percentile_matches_a_sorted_reference():
    rng = random.Random(3)
    values = sorted(rng.random() for _ in range(1001))
    assert percentile(values, 50) == values[500]
    assert percentile(values, 90) == values[900]
    assert percentile(values, 99) == values[990]


def test_summary_of_a_window():
    clock = FakeClock()
    histogram = SlidingHistogram(window_s=10, clock=clock)
    assert histogram.summary().to_wire() == {
        "count": 0,
        "mean": None,
        "p50": None,
        "p90": None,
        "p99": None,
        "max": None,
    }
    for value in range(1, 101):
        histogram.add(value / 100)
    summary = histogram.summary()
    assert summary.count == 100
    assert summary.mean == pytest.approx(0.505)
    assert summary.p50 == pytest.approx(0.505)
    assert summary.p99 == pytest.approx(0.9901)
    assert summary.max == 1.0


def test_old_samples_expire():
    clock = FakeClock()
    histogram = SlidingHistogram(window_s=10, clock=clock)
    histogram.add(100.0)
    clock.now += 6
    histogram.add(1.0)
    assert histogram.values() == [100.0, 1.0]
    clock.now += 5  # the first sample is now 11 s old
    assert histogram.values() == [1.0]
    assert histogram.summary().max == 1.0
    clock.now += 100
    assert histogram.summary().count == 0


def test_sample_count_is_capped():
    histogram = SlidingHistogram(window_s=60, max_samples=3, clock=FakeClock())
    for value in (1, 2, 3, 4, 5):
        histogram.add(value)
    assert histogram.values() == [3.0, 4.0, 5.0]
    with pytest.raises(ValueError):
        SlidingHistogram(window_s=0)
