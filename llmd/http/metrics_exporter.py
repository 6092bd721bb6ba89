"""GET /metrics: one daemon stats snapshot in the Prometheus text format.

The figures are the ones `llmd status --json` and `llmd top` read (the same snapshot),
rendered by prometheus_client under vLLM's names with an `llmd:` prefix (llmd's own names
where vLLM has no equivalent: structured outputs' grammars, the step's phases).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from llmd.http.vllm_metrics import PREFIX as VLLM_PREFIX
from llmd.http.vllm_metrics import VllmCompatCollector
from llmd.metrics.serving_metrics import STEP_PHASES
from llmd.protocol.grammar_section import GrammarSection
from llmd.protocol.metrics_sections import HistogramData
from llmd.protocol.stats_snapshot import StatsSnapshot
from llmd.structured_outputs import KINDS
from llmd.wait_breakdown import WAIT_REASONS

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FINISH_REASONS = ("stop", "length", "abort", "error")
"""Always exported (at zero until they happen), so rate() works from the first scrape."""

Reader = Callable[[StatsSnapshot], "float | None"]
"""One figure of a snapshot; None when its section is absent (queue and kv of a dead engine)."""

# (metric name, help, how to read it from a snapshot)
_GAUGES: tuple[tuple[str, str, Reader], ...] = (
    ("num_requests_running", "Requests in the running batch.",
     lambda s: None if s.queue is None else s.queue.running),
    ("num_requests_waiting", "Requests waiting to be scheduled.",
     lambda s: None if s.queue is None else s.queue.waiting),
    ("num_requests_preempted", "Waiting requests that were preempted.",
     lambda s: None if s.queue is None else s.queue.preempted),
    ("kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0-1).",
     lambda s: None if s.kv is None else s.kv.usage),
    ("num_requests_waiting_for_grammar",
     "Structured-output requests waiting for their grammar to compile.",
     lambda s: None if s.grammar is None else s.grammar.num_waiting),
    ("moe_experts_touched_per_step",
     "MoE models: (layer, expert) pairs a step's tokens were routed to, over the window.",
     lambda s: s.hardware.experts_touched_per_step),
    ("moe_expert_load_imbalance",
     "MoE models: busiest expert's tokens over the mean expert's, most uneven layer.",
     lambda s: None if s.moe is None else s.moe.max_imbalance),
    ("model_weight_bytes", "Bytes of the loaded weights (quantized codes and scales included).",
     lambda s: s.daemon.weight_bytes or None),
)  # fmt: skip
_COUNTERS: tuple[tuple[str, str, Reader], ...] = (
    ("prompt_tokens", "Prompt tokens computed (prefill).", lambda s: s.totals.prompt_tokens),
    ("generation_tokens", "Tokens generated.", lambda s: s.totals.generation_tokens),
    ("num_preemptions", "Requests preempted (recomputed later).",
     lambda s: s.totals.preemptions),
    ("prefix_cache_queries", "Prompt tokens looked up in the cache.",
     lambda s: None if s.kv is None else s.kv.prefix_query_tokens),
    ("prefix_cache_hits", "Prompt tokens served from the cache.",
     lambda s: None if s.kv is None else s.kv.prefix_hit_tokens),
    ("steps", "Engine steps run.", lambda s: s.totals.steps),
    ("grammar_cache_hits", "Constrained requests whose grammar was compiled or compiling.",
     lambda s: None if s.grammar is None else s.grammar.num_cache_hits),
    ("grammar_cache_misses", "Constrained requests that started a grammar compile.",
     lambda s: None if s.grammar is None else s.grammar.num_compiles),
    ("grammar_compile_failures", "Grammar compiles that failed.",
     lambda s: None if s.grammar is None else s.grammar.num_compile_failures),
    ("grammar_compile_timeouts", "Requests failed because their grammar compile timed out.",
     lambda s: None if s.grammar is None else s.grammar.num_compile_timeouts),
    ("spec_decode_num_drafts", "Speculative decoding: drafts verified (one per request and step).",
     lambda s: s.totals.spec_drafts),
    ("spec_decode_num_draft_tokens", "Speculative decoding: draft tokens verified.",
     lambda s: s.totals.spec_draft_tokens),
    ("spec_decode_num_accepted_tokens", "Speculative decoding: draft tokens accepted.",
     lambda s: s.totals.spec_accepted_tokens),
)  # fmt: skip
_HISTOGRAMS = (
    ("ttft", "time_to_first_token_seconds", "Arrival to first token."),
    ("tpot", "request_time_per_output_token_seconds", "Mean time per output token."),
    ("itl", "inter_token_latency_seconds", "Gaps between consecutive output tokens."),
    ("e2e", "e2e_request_latency_seconds", "Arrival to finish."),
    ("queue", "request_queue_time_seconds", "Arrival to first scheduled."),
    ("prefill", "request_prefill_time_seconds", "First scheduled to first token."),
    ("decode", "request_decode_time_seconds", "First token to last token."),
    ("prompt_tokens", "request_prompt_tokens", "Prompt length of completed requests."),
    ("generation_tokens", "request_generation_tokens", "Output length of completed requests."),
)


class SnapshotCollector(Collector):
    """Metric families of one stats snapshot (a fresh registry renders it per scrape)."""

    def __init__(self, snapshot: StatsSnapshot, prefix: str = "llmd:") -> None:
        self.snapshot = snapshot
        self.prefix = prefix

    def collect(self) -> Iterator[Metric]:
        """Gauges, counters and histograms present in the snapshot."""
        labels = ["model_name"]
        model = [self.snapshot.daemon.model]
        for family_class, table in ((GaugeMetricFamily, _GAUGES), (CounterMetricFamily, _COUNTERS)):
            for name, doc, read in table:
                value = read(self.snapshot)
                if value is not None:
                    family = family_class(self.prefix + name, doc, labels=labels)
                    family.add_metric(model, value)
                    yield family
        quantization = GaugeMetricFamily(
            self.prefix + "model_quantization_info",
            "The weights' quantization as a label (none: dense weights); value 1.",
            labels=[*labels, "quantization"],
        )
        quantization.add_metric([*model, self.snapshot.daemon.quantization or "none"], 1)
        yield quantization
        totals = self.snapshot.totals
        success = CounterMetricFamily(
            self.prefix + "request_success",
            "Finished requests by finish reason.",
            labels=[*labels, "finished_reason"],
        )
        for reason in sorted(set(FINISH_REASONS) | set(totals.finished)):
            success.add_metric([*model, reason], totals.finished.get(reason, 0))
        yield success
        waits = CounterMetricFamily(
            self.prefix + "request_wait_seconds",
            "Seconds finished requests waited for admission, by wait reason.",
            labels=[*labels, "reason"],
        )
        for reason in WAIT_REASONS:
            waits.add_metric([*model, reason], totals.wait_s.get(reason, 0.0))
        yield waits
        phases = CounterMetricFamily(
            self.prefix + "step_phase_seconds",
            "Seconds of engine steps by phase (grammar: filling structured outputs' masks).",
            labels=[*labels, "phase"],
        )
        for phase in STEP_PHASES:
            phases.add_metric([*model, phase], totals.phase_s.get(phase, 0.0))
        yield phases
        if totals.spec_accepted_per_position:
            per_position = CounterMetricFamily(
                self.prefix + "spec_decode_num_accepted_tokens_per_pos",
                "Speculative decoding: draft tokens accepted, by position in the draft.",
                labels=[*labels, "position"],
            )
            for position, count in enumerate(totals.spec_accepted_per_position):
                per_position.add_metric([*model, str(position)], count)
            yield per_position
        if self.snapshot.grammar is not None:
            yield from self._grammar_families(self.snapshot.grammar, labels, model)
        for key, name, doc in _HISTOGRAMS:
            data = self.snapshot.histograms.get(key)
            if data is not None:
                histogram = HistogramMetricFamily(self.prefix + name, doc, labels=labels)
                histogram.add_metric(model, _cumulative_buckets(data), data.sum)
                yield histogram

    def _grammar_families(
        self, grammar: GrammarSection, labels: list[str], model: list[str]
    ) -> Iterator[Metric]:
        """Structured-output requests by kind and the grammar compile-time histogram."""
        requests = CounterMetricFamily(
            self.prefix + "structured_output_requests",
            "Requests with structured outputs, by constraint kind.",
            labels=[*labels, "kind"],
        )
        for kind in sorted(set(KINDS) | set(grammar.requests_by_kind)):
            requests.add_metric([*model, kind], grammar.requests_by_kind.get(kind, 0))
        yield requests
        data = grammar.compile_histogram
        if data is not None:
            histogram = HistogramMetricFamily(
                self.prefix + "grammar_compile_time_seconds",
                "Seconds to compile a grammar (successful compiles).",
                labels=labels,
            )
            histogram.add_metric(model, _cumulative_buckets(data), data.sum)
            yield histogram


def render(snapshot: StatsSnapshot) -> bytes:
    """The Prometheus text exposition of `snapshot` (`llmd:` and `vllm:` families)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot))
    vllm_named = SnapshotCollector(snapshot, prefix=VLLM_PREFIX)
    registry.register(VllmCompatCollector(snapshot, vllm_named.collect()))
    return generate_latest(registry)


def _cumulative_buckets(data: HistogramData) -> list[tuple[str, float]]:
    """Per-bucket counts (last: +Inf) as Prometheus' cumulative `le` buckets."""
    buckets: list[tuple[str, float]] = []
    total = 0
    for bound, count in zip([*data.bounds, float("inf")], data.counts):
        total += count
        buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), total))
    return buckets
