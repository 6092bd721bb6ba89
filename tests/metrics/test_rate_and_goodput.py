"""Windowed rates and goodput under SLOs."""

from __future__ import annotations

import pytest

from llmd.metrics import GoodputTracker, RateMeter


class FakeClock:
    """A settable monotonic clock."""

    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


def test_rate_uses_the_elapsed_time_until_the_window_fills():
    clock = FakeClock()
    meter = RateMeter(window_s=60, clock=clock)
    clock.now += 10
    meter.add(50)
    assert meter.rate() == pytest.approx(5.0)  # 50 over the 10 s since creation
    clock.now += 50
    meter.add(70)
    assert meter.total() == 120 and meter.rate() == pytest.approx(2.0)


def test_rate_forgets_old_buckets_but_not_lifetime_total():
    clock = FakeClock()
    meter = RateMeter(window_s=10, clock=clock)
    meter.add(5)
    clock.now += 30
    meter.add(1)
    assert meter.total() == 1
    assert meter.rate() == pytest.approx(0.1)
    assert meter.lifetime_total == 6
    with pytest.raises(ValueError):
        RateMeter(window_s=1, bucket_s=2)


def test_goodput_counts_requests_within_both_slos():
    clock = FakeClock()
    tracker = GoodputTracker(slo_ttft_s=0.5, slo_tpot_s=0.05, window_s=10, clock=clock)
    clock.now += 10
    assert tracker.record(ttft=0.2, tpot=0.01)
    assert not tracker.record(ttft=0.9, tpot=0.01)  # slow first token
    assert not tracker.record(ttft=0.2, tpot=0.2)  # slow decode
    assert tracker.record(ttft=0.5, tpot=None)  # one token: no TPOT, meets it
    assert not tracker.record(ttft=None, tpot=None)  # never produced a token
    summary = tracker.summary()
    assert summary.num_completed == 5 and summary.num_good == 2
    assert summary.fraction == pytest.approx(0.4)
    assert summary.requests_per_s == pytest.approx(0.2)
    assert (summary.slo_ttft_ms, summary.slo_tpot_ms) == (500.0, 50.0)
    clock.now += 20
    assert tracker.summary().fraction is None


def test_unset_slos_accept_everything():
    tracker = GoodputTracker()
    assert tracker.meets_slo(ttft=100.0, tpot=10.0)
    assert tracker.summary().slo_ttft_ms is None
