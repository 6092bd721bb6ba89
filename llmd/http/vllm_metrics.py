"""The worker metrics routers scrape, under vLLM's own `vllm:` names.

vllm-router, SMG and llm-d read a worker's load from `vllm:num_requests_running`,
`vllm:num_requests_waiting` and `vllm:kv_cache_usage_perc` with no setting to rename
them, so llmd exports the vLLM-named families always, next to its `llmd:` ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmd.protocol.stats_snapshot import StatsSnapshot

PREFIX = "vllm:"
VLLM_FAMILY_NAMES = frozenset(
    PREFIX + name
    for name in (
        "num_requests_running",
        "num_requests_waiting",
        "kv_cache_usage_perc",
        "prompt_tokens",
        "generation_tokens",
        "num_preemptions",
        "prefix_cache_queries",
        "prefix_cache_hits",
        "request_success",
        "time_to_first_token_seconds",
        "request_time_per_output_token_seconds",
        "inter_token_latency_seconds",
        "e2e_request_latency_seconds",
        "request_queue_time_seconds",
        "request_prefill_time_seconds",
        "request_decode_time_seconds",
        "request_prompt_tokens",
        "request_generation_tokens",
    )
)
"""The `llmd:` families that mean exactly what vLLM's family of the same name means."""


class VllmCompatCollector(Collector):
    """The vLLM-named families of one snapshot, plus vLLM's older gauges routers still read.

    `families` are the snapshot's families already under `vllm:` (the exporter's own
    collector with this prefix); those vLLM also has are kept.
    """

    def __init__(self, snapshot: StatsSnapshot, families: Iterable[Metric]) -> None:
        self.snapshot = snapshot
        self.families = families

    def collect(self) -> Iterator[Metric]:
        """vLLM's families present in the snapshot (queue and KV gauges only while alive)."""
        for family in self.families:
            if family.name in VLLM_FAMILY_NAMES:
                yield family
        kv = self.snapshot.kv
        if kv is None:
            return
        model = [self.snapshot.daemon.model]
        usage = GaugeMetricFamily(
            PREFIX + "gpu_cache_usage_perc",
            "Fraction of KV-cache blocks in use (0-1); vLLM's older name.",
            labels=["model_name"],
        )
        usage.add_metric(model, kv.usage)
        yield usage
        hit_rate = GaugeMetricFamily(
            PREFIX + "gpu_prefix_cache_hit_rate",
            "Share of looked-up prompt tokens served from the cache since start (0-1).",
            labels=["model_name"],
        )
        hit_rate.add_metric(model, kv.prefix_hit_rate or 0.0)
        yield hit_rate
        config = GaugeMetricFamily(
            PREFIX + "cache_config_info",
            "The KV cache's configuration as labels (value 1).",
            labels=["block_size", "num_gpu_blocks"],
        )
        config.add_metric([str(kv.block_size), str(kv.num_total)], 1.0)
        yield config
