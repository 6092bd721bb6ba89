"""The `vllm:` families routers scrape, rendered from a snapshot without a daemon."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from llmd.http.metrics_exporter import render
from llmd.protocol.engine_sections import KVUsage, QueueCounts
from llmd.protocol.metrics_sections import HistogramData, TotalsSection
from tests.protocol.snapshot_samples import sample_snapshot

QUEUE = QueueCounts(waiting=3, running=2, preempted=1, preemptions_total=4)
KV = KVUsage(block_size=16, num_total=64, num_used=16, num_cached=8, num_free=40,
             prefix_query_tokens=100, prefix_hit_tokens=25)  # fmt: skip


def _samples(text: str) -> dict[str, float]:
    """Sample name (labels other than model_name appended) to value."""
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            extra = ",".join(
                f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "model_name"
            )
            samples[sample.name + (f"{{{extra}}}" if extra else "")] = sample.value
    return samples


def test_the_router_gauges_are_the_snapshot_figures_under_vllm_names():
    histogram = HistogramData(bounds=(0.1, 1.0), counts=(2, 3, 1), sum=4.5, count=6)
    snapshot = sample_snapshot(
        queue=QUEUE,
        kv=KV,
        totals=TotalsSection(finished={"stop": 2}, prompt_tokens=70, generation_tokens=9),
        histograms={"ttft": histogram},
    )
    samples = _samples(render(snapshot).decode())
    assert samples["vllm:num_requests_running"] == 2
    assert samples["vllm:num_requests_waiting"] == 3
    assert samples["vllm:kv_cache_usage_perc"] == 0.25  # 16 of 64 blocks, a share not percent
    assert samples["vllm:gpu_cache_usage_perc"] == 0.25
    assert samples["vllm:prefix_cache_queries_total"] == 100
    assert samples["vllm:prefix_cache_hits_total"] == 25
    assert samples["vllm:gpu_prefix_cache_hit_rate"] == 0.25
    assert samples["vllm:prompt_tokens_total"] == 70
    assert samples["vllm:generation_tokens_total"] == 9
    assert samples["vllm:request_success_total{finished_reason=stop}"] == 2
    assert samples["vllm:time_to_first_token_seconds_count"] == 6
    assert samples["vllm:cache_config_info{block_size=16,num_gpu_blocks=64}"] == 1
    assert samples["llmd:num_requests_running"] == 2  # llmd's own names stay


def test_only_families_vllm_also_has_get_the_vllm_prefix():
    text = render(sample_snapshot(queue=QUEUE, kv=KV)).decode()
    names = {family.name for family in text_string_to_metric_families(text)}
    assert "llmd:num_requests_preempted" in names and "llmd:request_wait_seconds" in names
    assert "vllm:num_requests_preempted" not in names
    assert "vllm:request_wait_seconds" not in names


def test_a_dead_engine_has_no_vllm_load_gauges():
    text = render(sample_snapshot(totals=TotalsSection(finished={"stop": 2}))).decode()
    names = {family.name for family in text_string_to_metric_families(text)}
    assert "vllm:request_success" in names
    assert not {"vllm:num_requests_running", "vllm:kv_cache_usage_perc",
                "vllm:gpu_prefix_cache_hit_rate"} & names  # fmt: skip
