"""BucketHistogram counts every sample since start; ServingMetrics exports them for /metrics."""

from __future__ import annotations

import pytest

from llmd.metrics import ServingMetrics
from llmd.metrics.bucket_histogram import BucketHistogram
from llmd.outputs import RequestMetrics


def test_values_land_in_the_first_bucket_whose_bound_they_do_not_exceed():
    histogram = BucketHistogram([1, 2, 5])
    for value in (0.5, 1, 1.5, 2, 4.9, 5, 7, 100):
        histogram.add(value)
    data = histogram.data()
    assert data.counts == (2, 2, 2, 2)  # (<=1: 0.5, 1) (<=2: 1.5, 2) (<=5: 4.9, 5) (+Inf)
    assert data.count == 8 and data.sum == pytest.approx(121.9)
    assert data.bounds == (1.0, 2.0, 5.0)


def test_bounds_must_increase():
    with pytest.raises(ValueError):
        BucketHistogram([2, 1])
    with pytest.raises(ValueError):
        BucketHistogram([])


def test_serving_metrics_lifetime_histograms_count_completed_requests_only():
    metrics = ServingMetrics()
    completed = RequestMetrics(
        num_prompt_tokens=7, num_generated_tokens=3, num_cached_tokens=0, num_preemptions=0,
        queue_time=0.002, prefill_time=0.03, ttft=0.032, decode_time=0.2, tpot=0.1, e2e=0.232,
        itl=(0.1, 0.1),
    )  # fmt: skip
    metrics.record_request(completed, "stop")
    metrics.record_request(completed, "length")
    metrics.record_request(completed, "abort")
    histograms = metrics.snapshot().histograms
    assert histograms["e2e"].count == 2
    assert histograms["itl"].count == 4
    assert histograms["prompt_tokens"].sum == 14
    assert histograms["generation_tokens"].sum == 6
    assert histograms["decode"].sum == pytest.approx(0.4)
    assert histograms["queue"].counts[1] == 2  # 0.002 lands under the 2.5 ms bound
