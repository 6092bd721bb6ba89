"""What `llmd top` draws: frozen view dataclasses, one per screen region.

Panels and hint rules read only these (the daemon facts, request rows and the timeline are
the protocol's own types), never whole snapshots, so the screen can be tested from fixed values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmd.protocol.engine_sections import RequestRow, RequestTimeline
from llmd.protocol.stats_snapshot import DaemonSection


@dataclass(frozen=True)
class QueueView:
    """Scheduler queues now and over time."""

    waiting: int = 0
    running: int = 0
    preempted: int = 0
    preemptions_total: int = 0
    waiting_history: tuple[float, ...] = ()
    running_history: tuple[float, ...] = ()
    preempted_history: tuple[float, ...] = ()
    waiting_growth_per_s: float | None = None
    """Slope of the waiting count over the recent history (requests per second)."""
    recent_preemptions: int = 0
    """Preemptions during the recent history."""
    waiting_for_grammar: int | None = None
    """Structured-output requests waiting for their grammar to compile (None until the
    daemon has seen a constrained request: the line stays off the screen until then)."""


@dataclass(frozen=True)
class KVView:
    """KV-cache occupancy and the block map."""

    block_size: int | None = None
    num_total: int = 0
    num_used: int = 0
    num_cached: int = 0
    num_free: int = 0
    usage: float | None = None
    prefix_hit_rate: float | None = None
    usage_history: tuple[float, ...] = ()
    cells: tuple[int, ...] = ()
    """Block-map cells: an index into `owners`, or FREE, CACHED, SHARED (llmd.metrics)."""
    owners: tuple[str, ...] = ()
    blocks_per_cell: int = 1


@dataclass(frozen=True)
class GrammarView:
    """Structured outputs since start: constrained requests and their grammar compiles."""

    num_requests: int = 0
    num_compiles: int = 0
    num_cache_hits: int = 0
    num_failed: int = 0
    """Compiles that failed plus requests whose compile timed out."""
    compile_p50_s: float | None = None
    compile_p90_s: float | None = None
    compile_p99_s: float | None = None


@dataclass(frozen=True)
class StepView:
    """How each step's work splits between prefill and decode, and where its time goes."""

    prompt_tokens_per_step: float | None = None
    generation_tokens_per_step: float | None = None
    prompt_per_step_history: tuple[float, ...] = ()
    generation_per_step_history: tuple[float, ...] = ()
    steps_per_s: float | None = None
    step_mean_s: float | None = None
    step_p99_s: float | None = None
    phase_ms: dict[str, float | None] = field(default_factory=dict)
    """Mean ms per step of schedule, grammar, prepare, forward, sample and idle_gap."""
    prefill_time_share: float | None = None
    """Fraction of forward time spent in steps with prefill (when the daemon reports it)."""
    grammar: GrammarView | None = None
    """None until the daemon has seen a constrained request."""


@dataclass(frozen=True)
class ThroughputView:
    """Tokens and requests per second."""

    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    prompt_history: tuple[float, ...] = ()
    generation_history: tuple[float, ...] = ()
    total_prompt_tokens: int = 0
    total_generation_tokens: int = 0
    is_speculating: bool = False
    """The daemon has verified drafts since start (speculative decoding is on)."""
    spec_window_s: float | None = None
    """Seconds the speculation figures cover: the daemon's metrics window once top has
    watched that long (None before two snapshots)."""
    spec_acceptance_rate: float | None = None
    """Speculative decoding over the window: accepted / draft tokens (None: no draft)."""
    spec_mean_acceptance_length: float | None = None
    """Tokens a verify step emitted on average over the window: 1 + accepted / drafts."""
    spec_tokens_per_step: float | None = None
    """Tokens a running request's decode step emitted over the window, drafted or not
    (1 + accepted / decode steps): what speculation buys, backoff and opt-outs included."""


@dataclass(frozen=True)
class LatencyView:
    """Latency percentiles and goodput over the daemon's window."""

    percentiles: dict[str, tuple[float | None, float | None, float | None]] = field(
        default_factory=dict
    )
    """ttft, tpot, itl, e2e, queue -> (p50, p90, p99) in seconds."""
    window_s: float | None = None
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    goodput_per_s: float | None = None
    goodput_fraction: float | None = None
    num_good: int = 0
    num_completed: int = 0


@dataclass(frozen=True)
class EfficiencyView:
    """Busy versus efficient: achieved bandwidth and FLOP/s against the device's peaks."""

    busy_fraction: float | None = None
    """Share of wall time the engine spent inside steps."""
    decode_gb_per_s: float | None = None
    peak_gb_per_s: float | None = None
    prefill_tflop_per_s: float | None = None
    peak_tflop_per_s: float | None = None
    peak_source: str | None = None
    """Where the peaks come from when the daemon says ("measured" at start-up, "published")."""
    best_decode_gb_per_s: float | None = None
    """The highest decode bandwidth seen since top started: the yardstick without a peak."""
    best_prefill_tflop_per_s: float | None = None
    experts_touched_per_step: float | None = None
    """MoE models: (layer, expert) pairs a step touched; None for a dense model."""
    num_expert_slots: int = 0
    """MoE layers x routed experts."""


@dataclass(frozen=True)
class ConnectionView:
    """The link to the daemon, as the header shows it."""

    status: str = "connecting"
    """connecting, live or lost."""
    message: str = ""
    retry_in_s: float | None = None
    num_attempts: int = 0
    last_update_age_s: float | None = None
    is_paused: bool = False


@dataclass(frozen=True)
class Hint:
    """A known bottleneck showing in the numbers, and what to do about it."""

    name: str
    message: str
    severity: str = "warning"


@dataclass(frozen=True)
class TopView:
    """Everything on the screen."""

    header: DaemonSection | None = None
    """The daemon facts the header shows (None before the first snapshot)."""
    queue: QueueView = field(default_factory=QueueView)
    kv: KVView = field(default_factory=KVView)
    steps: StepView = field(default_factory=StepView)
    throughput: ThroughputView = field(default_factory=ThroughputView)
    latency: LatencyView = field(default_factory=LatencyView)
    efficiency: EfficiencyView = field(default_factory=EfficiencyView)
    requests: tuple[RequestRow, ...] = ()
    num_live_requests: int = 0
    selected_request_id: str | None = None
    sort_key: str = "age"
    timeline: RequestTimeline | None = None
    connection: ConnectionView = field(default_factory=ConnectionView)
    hints: tuple[Hint, ...] = ()
    has_snapshot: bool = False
