"""Everything the daemon measures, in one thread-safe object read by stats snapshots.

The engine thread records steps, the text thread records finished requests and the I/O
thread reads summaries; one lock keeps them consistent without slowing any of them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from llmd.metrics.bucket_histogram import LATENCY_BUCKETS_S, TOKEN_COUNT_BUCKETS, BucketHistogram
from llmd.metrics.goodput import GoodputTracker
from llmd.metrics.histogram import SlidingHistogram
from llmd.metrics.rate import RateMeter
from llmd.metrics.roofline import ModelCost
from llmd.protocol.metrics_sections import (
    HardwareSection,
    LatencySection,
    MetricsSections,
    StepSection,
    ThroughputSection,
    TotalsSection,
)
from llmd.wait_breakdown import WAIT_REASONS

LATENCY_NAMES = ("ttft", "tpot", "itl", "e2e", "queue")
STEP_PHASES = ("schedule", "grammar", "prepare", "forward", "sample", "idle_gap")
"""In the order a step runs them; `grammar` fills structured outputs' token masks."""
COMPLETED_REASONS = ("stop", "length")
LIFETIME_LATENCY_NAMES = ("ttft", "tpot", "itl", "e2e", "queue", "prefill", "decode")
LIFETIME_LENGTH_NAMES = ("prompt_tokens", "generation_tokens")


class ServingMetrics:
    """Latency histograms, throughput, step-time split, goodput and hardware estimates."""

    def __init__(
        self,
        window_s: float = 60.0,
        slo_ttft_s: float | None = None,
        slo_tpot_s: float | None = None,
        cost: ModelCost | None = None,
        dtype_bytes: int = 4,
        kv_bytes_per_token: int = 0,
        clock: Callable[[], float] = time.monotonic,
        peak_gb_per_s: float | None = None,
        peak_tflop_per_s: float | None = None,
        peak_source: str = "unknown",
    ) -> None:
        self.window_s = window_s
        self.peak_gb_per_s = peak_gb_per_s
        """The device's memory-bandwidth peak: published for known GPUs, measured on CPU."""
        self.peak_tflop_per_s = peak_tflop_per_s
        """The device's dense compute peak for the running dtype, when known or measured."""
        self.peak_source = peak_source
        """Where the peaks come from: "published", "measured" or "unknown"."""
        self.cost = cost or ModelCost(num_params=0)
        self.dtype_bytes = dtype_bytes
        self.kv_bytes_per_token = kv_bytes_per_token
        self._clock = clock
        self._lock = threading.Lock()
        self._latency = {name: SlidingHistogram(window_s, clock=clock) for name in LATENCY_NAMES}
        self._step_time = SlidingHistogram(window_s, clock=clock)
        self.goodput = GoodputTracker(slo_ttft_s, slo_tpot_s, window_s, clock)
        self._lifetime = {n: BucketHistogram(LATENCY_BUCKETS_S) for n in LIFETIME_LATENCY_NAMES}
        """Since-start histograms of completed requests, for Prometheus (/metrics)."""
        for name in LIFETIME_LENGTH_NAMES:
            self._lifetime[name] = BucketHistogram(TOKEN_COUNT_BUCKETS)

        def meter() -> RateMeter:
            return RateMeter(window_s, clock=clock)

        self._steps = meter()
        self._prompt_tokens = meter()
        self._generation_tokens = meter()
        self._finished_requests = meter()
        self._phase_seconds = {phase: meter() for phase in STEP_PHASES}
        self._decode_bytes = meter()
        self._decode_seconds = meter()
        self._prefill_flops = meter()
        self._prefill_seconds = meter()
        self._experts_touched = meter()
        self.num_scheduled_seqs = 0
        """Sequences summed over all steps (divided by steps: the mean batch size)."""
        self.num_decode_seqs = 0
        """Decode rows (verify chunks among them) summed over all steps."""
        self.num_preemptions = 0
        self.finish_counts: dict[str, int] = {}
        self.wait_seconds = dict.fromkeys(WAIT_REASONS, 0.0)
        """Seconds finished requests (aborted ones too) waited for admission, per reason."""
        self.spec_counts = [0, 0, 0]
        """Speculative decoding since start: drafts, draft tokens, accepted tokens."""
        self.spec_accepted_per_position: list[int] = []

    def record_step(self, stats: Any, num_generated_tokens: int, idle_gap_s: float) -> None:
        """Record one engine step (a StepStats), the tokens it sampled, and the gap before it."""
        now = self._clock()
        with self._lock:
            self._steps.add(1, now)
            self._step_time.add(stats.total_s, now)
            self._prompt_tokens.add(stats.num_prefill_tokens, now)
            self._generation_tokens.add(num_generated_tokens, now)
            for phase, seconds in _phase_seconds(stats, idle_gap_s).items():
                self._phase_seconds[phase].add(seconds, now)
            self.num_preemptions += stats.num_preempted
            self._experts_touched.add(stats.num_experts_touched, now)
            if stats.spec_decode is not None:
                self._record_spec(stats.spec_decode)
            self.num_scheduled_seqs += stats.num_prefill_seqs + stats.num_decode_seqs
            self.num_decode_seqs += stats.num_decode_seqs
            if stats.num_prefill_tokens == 0 and stats.num_decode_tokens > 0:
                step_bytes = self.cost.decode_step_bytes(
                    self.dtype_bytes,
                    stats.num_decode_seqs,
                    stats.kv_context_tokens,
                    self.kv_bytes_per_token,
                    stats.num_experts_touched,
                )
                self._decode_bytes.add(step_bytes, now)
                self._decode_seconds.add(stats.forward_s, now)
            elif stats.num_prefill_tokens > 0:
                # A mixed step's decode rows ride along in the same matmuls and forward time.
                flops = self.cost.step_flops(stats.num_tokens, stats.num_sampling_seqs)
                self._prefill_flops.add(flops, now)
                self._prefill_seconds.add(stats.forward_s, now)

    def _record_spec(self, spec: Any) -> None:
        """Add a step's SpecDecodeCounts to the totals (caller holds the lock)."""
        counts = self.spec_counts
        counts[0] += spec.num_drafts
        counts[1] += spec.num_draft_tokens
        counts[2] += spec.num_accepted_tokens
        per_position = self.spec_accepted_per_position
        for position, count in enumerate(spec.accepted_per_position):
            if position == len(per_position):
                per_position.append(0)
            per_position[position] += count

    def record_request(self, metrics: Any, finish_reason: str) -> None:
        """Record a finished request's RequestMetrics (latencies count only if it completed)."""
        now = self._clock()
        with self._lock:
            self.finish_counts[finish_reason] = self.finish_counts.get(finish_reason, 0) + 1
            self._finished_requests.add(1, now)
            for reason, seconds in metrics.waits.wait_s.items():
                self.wait_seconds[reason] = self.wait_seconds.get(reason, 0.0) + seconds
            if finish_reason not in COMPLETED_REASONS:
                return
            for name, value in _latencies(metrics).items():
                if value is not None:
                    self._latency[name].add(value, now)
            for gap in metrics.itl:
                self._latency["itl"].add(gap, now)
            self._record_lifetime(metrics)
            self.goodput.record(metrics.ttft, metrics.tpot, now)

    def _record_lifetime(self, metrics: Any) -> None:
        """Add a completed request to the since-start histograms (caller holds the lock)."""
        values = {
            **_latencies(metrics),
            "prefill": metrics.prefill_time,
            "decode": metrics.decode_time,
            "prompt_tokens": metrics.num_prompt_tokens,
            "generation_tokens": metrics.num_generated_tokens,
        }
        for name, value in values.items():
            if value is not None:
                self._lifetime[name].add(value)
        for gap in metrics.itl:
            self._lifetime["itl"].add(gap)

    def snapshot(self) -> MetricsSections:
        """Every measured section now: latency, goodput, throughput, step, hardware, totals."""
        now = self._clock()
        with self._lock:
            num_steps = self._steps.total(now)
            phase_ms = {
                f"{phase}_ms": _ratio(meter.total(now) * 1000, num_steps)
                for phase, meter in self._phase_seconds.items()
            }
            prefill_s, decode_s = self._prefill_seconds.total(now), self._decode_seconds.total(now)
            return MetricsSections(
                window_s=self.window_s,
                latency=LatencySection(
                    **{name: h.summary(now) for name, h in self._latency.items()}
                ),
                goodput=self.goodput.summary(now),
                throughput=ThroughputSection(
                    prompt_tokens_per_s=self._prompt_tokens.rate(now),
                    generation_tokens_per_s=self._generation_tokens.rate(now),
                    requests_per_s=self._finished_requests.rate(now),
                    steps_per_s=self._steps.rate(now),
                    prompt_tokens_per_step=_ratio(self._prompt_tokens.total(now), num_steps),
                    generation_tokens_per_step=_ratio(
                        self._generation_tokens.total(now), num_steps
                    ),
                ),
                step=StepSection(
                    time=self._step_time.summary(now),
                    prefill_time_share=_ratio(prefill_s, prefill_s + decode_s),
                    **phase_ms,
                ),
                hardware=HardwareSection(
                    decode_gb_per_s=_ratio(self._decode_bytes.total(now) / 1e9, decode_s),
                    prefill_tflop_per_s=_ratio(self._prefill_flops.total(now) / 1e12, prefill_s),
                    peak_gb_per_s=self.peak_gb_per_s,
                    peak_tflop_per_s=self.peak_tflop_per_s,
                    peak_source=self.peak_source,
                    experts_touched_per_step=(
                        _ratio(self._experts_touched.total(now), num_steps)
                        if self.cost.num_experts
                        else None
                    ),
                    num_expert_slots=self.cost.num_moe_layers * self.cost.num_experts,
                ),
                totals=TotalsSection(
                    steps=int(self._steps.lifetime_total),
                    prompt_tokens=int(self._prompt_tokens.lifetime_total),
                    generation_tokens=int(self._generation_tokens.lifetime_total),
                    preemptions=self.num_preemptions,
                    scheduled_seqs=self.num_scheduled_seqs,
                    decode_seqs=self.num_decode_seqs,
                    decode_bytes=self._decode_bytes.lifetime_total,
                    decode_seconds=self._decode_seconds.lifetime_total,
                    prefill_flops=self._prefill_flops.lifetime_total,
                    prefill_seconds=self._prefill_seconds.lifetime_total,
                    finished=dict(self.finish_counts),
                    wait_s=dict(self.wait_seconds),
                    phase_s={
                        phase: meter.lifetime_total for phase, meter in self._phase_seconds.items()
                    },
                    spec_drafts=self.spec_counts[0],
                    spec_draft_tokens=self.spec_counts[1],
                    spec_accepted_tokens=self.spec_counts[2],
                    spec_accepted_per_position=tuple(self.spec_accepted_per_position),
                ),
                histograms={name: h.data() for name, h in self._lifetime.items()},
            )


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def _phase_seconds(stats: Any, idle_gap_s: float) -> dict[str, float]:
    """A step's seconds in each of STEP_PHASES."""
    return {
        "schedule": stats.schedule_s,
        "grammar": stats.grammar_s,
        "prepare": stats.prepare_s,
        "forward": stats.forward_s,
        "sample": stats.sample_s,
        "idle_gap": idle_gap_s,
    }


def _latencies(metrics: Any) -> dict[str, float | None]:
    """A completed request's latencies that both the window and the since-start keep."""
    return {
        "ttft": metrics.ttft,
        "tpot": metrics.tpot,
        "e2e": metrics.e2e,
        "queue": metrics.queue_time,
    }
