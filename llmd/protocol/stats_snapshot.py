"""A stats snapshot as typed data: what `stats` and `subscribe` replies carry.

The daemon builds one `StatsSnapshot` per collection and every reader (`llmd top`,
`llmd status`, the chat, `/metrics`, `llmd bench`) reads its fields, so the schema lives
in one place. It is versioned on its own: a daemon may add keys, which older readers
ignore, but removing, renaming or retyping one bumps SNAPSHOT_VERSION, and a reader
refuses a snapshot of another version with a ProtocolError instead of misreading it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from llmd.protocol.engine_sections import (
    BlockMap,
    KVUsage,
    QueueCounts,
    RequestRow,
    RequestTimeline,
)
from llmd.protocol.errors import ProtocolError
from llmd.protocol.metrics_sections import (
    GoodputSection,
    HardwareSection,
    HistogramData,
    LatencySection,
    MetricsSections,
    StepSection,
    ThroughputSection,
    TotalsSection,
)
from llmd.protocol.wire_data import DataT, WireData

SNAPSHOT_VERSION = 2
"""Version 1 was the untyped map of llmd 0.x, which carried no version key."""


@dataclass(frozen=True)
class CpuPlacementSection(WireData):
    """The cores the forward pass and the other threads are pinned to."""

    forward_cpu_ids: tuple[int, ...]
    serving_cpu_ids: tuple[int, ...]


@dataclass(frozen=True)
class DaemonSection(WireData):
    """The daemon and the engine it serves: fixed facts, then its state now."""

    model: str
    device: str
    dtype: str
    device_name: str
    """The GPU's name, or "cpu"."""
    max_model_len: int
    num_params: int
    vocab_size: int
    scheduling_policy: str
    max_num_batched_tokens: int
    """The per-step token budget."""
    max_num_seqs: int
    block_size: int
    num_blocks: int
    attention_backend: str
    async_scheduling: bool
    """Whether the engine prepares step N+1 before reading step N's samples."""
    version: str
    protocol_version: int
    pid: int
    address: str
    instance_id: str
    state: str
    """warming, ok, draining or dead."""
    error: str | None
    """Why the engine died, when it did."""
    uptime_s: float
    num_in_flight: int
    max_queued_requests: int
    num_subscriptions: int
    admission: str
    """queue or slo."""
    num_refused_by_admission: int
    log_file: str | None = None
    cpu_placement: CpuPlacementSection | None = None
    """None when not pinned (or not on CPU)."""
    num_connections: int | None = None
    """Client connections open now (None without a connection gate)."""
    max_connections: int | None = None
    num_refused_connections: int | None = None


@dataclass(frozen=True)
class StatsSnapshot(WireData):
    """One snapshot: daemon facts, measured sections, and the engine's state when alive.

    `queue` and `kv` are None while the engine is dead; `requests`, `recent`,
    `num_requests`, `timeline` and `block_map` are None unless asked for (a timeline is
    also None when its request is unknown).
    """

    time: float
    """Wall-clock time (Unix seconds)."""
    window_s: float
    """What windowed figures cover (--metrics-window)."""
    daemon: DaemonSection
    latency: LatencySection
    goodput: GoodputSection
    throughput: ThroughputSection
    step: StepSection
    hardware: HardwareSection
    totals: TotalsSection
    histograms: dict[str, HistogramData] = field(default_factory=dict)
    queue: QueueCounts | None = None
    kv: KVUsage | None = None
    requests: tuple[RequestRow, ...] | None = None
    """Live requests, oldest first, at most the asked-for number."""
    num_requests: int | None = None
    """Every live request, however many rows were sent."""
    recent: tuple[RequestRow, ...] | None = None
    """The most recently finished requests, newest first."""
    timeline: RequestTimeline | None = None
    block_map: BlockMap | None = None
    snapshot_version: int = SNAPSHOT_VERSION

    @classmethod
    def of(
        cls,
        time: float,
        daemon: DaemonSection,
        metrics: MetricsSections,
        queue: QueueCounts | None = None,
        kv: KVUsage | None = None,
    ) -> StatsSnapshot:
        """A snapshot of the daemon's facts and measured sections (and the engine's counts)."""
        return cls(
            time=time,
            window_s=metrics.window_s,
            daemon=daemon,
            latency=metrics.latency,
            goodput=metrics.goodput,
            throughput=metrics.throughput,
            step=metrics.step,
            hardware=metrics.hardware,
            totals=metrics.totals,
            histograms=metrics.histograms,
            queue=queue,
            kv=kv,
        )

    @classmethod
    def from_wire(cls: type[DataT], data: Mapping[str, object], path: str = "") -> DataT:
        """Read a decoded snapshot; another version raises ProtocolError."""
        version = data.get("snapshot_version")
        if version != SNAPSHOT_VERSION or isinstance(version, bool):
            raise ProtocolError(
                f"stats snapshot version {version!r} is not supported (this end reads "
                f"{SNAPSHOT_VERSION}); use a client of the daemon's llmd version",
                f"{path}snapshot_version",
            )
        return super().from_wire(data, path)
