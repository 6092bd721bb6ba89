"""The daemon's measured sections of a stats snapshot: latency, goodput, throughput, steps.

`ServingMetrics.snapshot()` builds them and readers take their fields, so a renamed
figure is a type error in every reader instead of a silent None on one screen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmd.protocol.wire_data import WireData


@dataclass(frozen=True)
class WindowSummary(WireData):
    """count, mean, p50, p90, p99 and max of a sliding window (None while it is empty)."""

    count: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class LatencySection(WireData):
    """Seconds per completed request (`stop` or `length`) within the window."""

    ttft: WindowSummary = field(default_factory=WindowSummary)
    tpot: WindowSummary = field(default_factory=WindowSummary)
    itl: WindowSummary = field(default_factory=WindowSummary)
    """Inter-token latency: every gap between two output tokens."""
    e2e: WindowSummary = field(default_factory=WindowSummary)
    queue: WindowSummary = field(default_factory=WindowSummary)

    def by_name(self, name: str) -> WindowSummary:
        """The summary called `name` (ttft, tpot, itl, e2e or queue)."""
        summary: WindowSummary = getattr(self, name)
        return summary


@dataclass(frozen=True)
class GoodputSection(WireData):
    """Completed requests within both SLOs, per second and as a share, over the window."""

    slo_ttft_ms: float | None = None
    """From --slo-ttft-ms; None when not set, and then not enforced."""
    slo_tpot_ms: float | None = None
    requests_per_s: float = 0.0
    fraction: float | None = None
    num_good: int = 0
    num_completed: int = 0


@dataclass(frozen=True)
class ThroughputSection(WireData):
    """Tokens, requests and steps per second over the window, and tokens per step."""

    prompt_tokens_per_s: float = 0.0
    """Prompt tokens computed (prefix-cache hits are not computed)."""
    generation_tokens_per_s: float = 0.0
    requests_per_s: float = 0.0
    """Finished, whatever the reason."""
    steps_per_s: float = 0.0
    prompt_tokens_per_step: float | None = None
    generation_tokens_per_step: float | None = None


@dataclass(frozen=True)
class StepSection(WireData):
    """Whole-step seconds and the mean milliseconds per step of each phase."""

    time: WindowSummary = field(default_factory=WindowSummary)
    prefill_time_share: float | None = None
    """Forward time in steps with prefill over forward time of all steps."""
    schedule_ms: float | None = None
    grammar_ms: float | None = None
    """Filling structured outputs' token masks (zero in steps without a constrained row)."""
    prepare_ms: float | None = None
    forward_ms: float | None = None
    sample_ms: float | None = None
    idle_gap_ms: float | None = None
    """Time outside `step()` while requests were waiting or running: host overhead."""


@dataclass(frozen=True)
class HardwareSection(WireData):
    """Achieved decode bandwidth and prefill compute, and the device's peaks when known."""

    decode_gb_per_s: float | None = None
    prefill_tflop_per_s: float | None = None
    peak_gb_per_s: float | None = None
    peak_tflop_per_s: float | None = None
    peak_source: str = "unknown"
    """Where the peaks come from: published, measured or unknown."""
    experts_touched_per_step: float | None = None
    """MoE models: (layer, expert) pairs the tokens of a step were routed to, per step in
    the window; the decode bytes count only these experts' weights (None when dense)."""
    num_expert_slots: int = 0
    """MoE layers x routed experts: what `experts_touched_per_step` is out of (0: dense)."""


@dataclass(frozen=True)
class TotalsSection(WireData):
    """Counts since start."""

    steps: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    scheduled_seqs: int = 0
    """Sequences summed over all steps (over steps: the mean batch size)."""
    decode_seqs: int = 0
    """Decode rows summed over all steps, a verify chunk being one: requests' decode steps
    (each emits one token plus its accepted drafts, so speculation's yield per step is
    1 + spec_accepted_tokens / decode_seqs)."""
    decode_bytes: float = 0.0
    decode_seconds: float = 0.0
    prefill_flops: float = 0.0
    prefill_seconds: float = 0.0
    finished: dict[str, int] = field(default_factory=dict)
    """Requests by finish reason, `error` included."""
    wait_s: dict[str, float] = field(default_factory=dict)
    """Seconds finished requests (aborted ones too) waited for admission, per reason."""
    phase_s: dict[str, float] = field(default_factory=dict)
    """Seconds of every step in each phase (schedule, grammar, ..., idle_gap)."""
    spec_drafts: int = 0
    """Speculative decoding: verify chunks run (requests with a draft, per step)."""
    spec_draft_tokens: int = 0
    """Draft tokens verified."""
    spec_accepted_tokens: int = 0
    """Draft tokens accepted (tokens emitted without a step of their own)."""
    spec_accepted_per_position: tuple[int, ...] = ()
    """Accepted draft tokens by position in the draft (the first position first)."""


@dataclass(frozen=True)
class HistogramData(WireData):
    """A since-start histogram: counts per upper bound, then one for larger values."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    """Not cumulative: a value lands in the first bucket whose bound it does not exceed."""
    sum: float
    count: int


@dataclass(frozen=True)
class MetricsSections(WireData):
    """Every measured section, as `ServingMetrics.snapshot()` returns them."""

    window_s: float
    latency: LatencySection
    goodput: GoodputSection
    throughput: ThroughputSection
    step: StepSection
    hardware: HardwareSection
    totals: TotalsSection
    histograms: dict[str, HistogramData] = field(default_factory=dict)
    """ttft, tpot, itl, e2e, queue, prefill, decode (seconds); prompt_tokens, generation_tokens."""
