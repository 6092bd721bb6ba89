"""A stats snapshot as typed data: what `stats` and `subscribe` replies carry.

The daemon builds one `StatsSnapshot` per collection and every reader (`llmd top`,
`llmd status`, the chat, `/metrics`, `llmd bench`) reads its fields, so the schema lives
in one place. It is versioned on its own: a daemon may add keys, which older readers
ignore, but removing, renaming or retyping one bumps SNAPSHOT_VERSION, and a reader
refuses a snapshot of another version with a ProtocolError instead of misreading it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmd.protocol.engine_sections import (
    BlockMap,
    EngineFacts,
    KVUsage,
    QueueCounts,
    RequestRow,
    RequestTimeline,
)
from llmd.protocol.errors import ProtocolError
from llmd.protocol.grammar_section import GrammarSection
from llmd.protocol.metrics_sections import (
    MetricsSections,
)
from llmd.protocol.moe_section import MoeSection
from llmd.protocol.wire_data import DataT, WireData

SNAPSHOT_VERSION = 2
"""Version 1 was the untyped map of llmd 0.x, which carried no version key."""


@dataclass(frozen=True)
class CpuPlacementSection(WireData):
    """The cores the forward pass and the other threads are pinned to."""

    forward_cpu_ids: tuple[int, ...]
    serving_cpu_ids: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class DaemonSection(EngineFacts):
    """The engine the daemon serves (its `EngineFacts`), then the daemon's own state now."""

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
    tool_call_parser: str | None = None
    """How the HTTP API reads free-form tool calls (`hermes` or `llama3`; None from a daemon
    that predates tools)."""

    @classmethod
    def of(cls, facts: EngineFacts, **daemon_state: Any) -> DaemonSection:
        """The section for the engine of `facts`, with the daemon's fields as keywords."""
        return cls(**vars(facts), **daemon_state)


@dataclass(frozen=True, kw_only=True)
class StatsSnapshot(MetricsSections):
    """One snapshot: daemon facts, the measured sections, and the engine's state when alive.

    `queue`, `kv` and `grammar` are None while the engine is dead (`grammar` also from a
    daemon that predates structured outputs); `requests`, `recent`,
    `num_requests`, `timeline` and `block_map` are None unless asked for (a timeline is
    also None when its request is unknown).
    """

    time: float
    """Wall-clock time (Unix seconds)."""
    daemon: DaemonSection
    queue: QueueCounts | None = None
    kv: KVUsage | None = None
    grammar: GrammarSection | None = None
    """Structured outputs: constrained requests, grammar compiles and the compile queue."""
    requests: tuple[RequestRow, ...] | None = None
    """Live requests, oldest first, at most the asked-for number."""
    num_requests: int | None = None
    """Every live request, however many rows were sent."""
    recent: tuple[RequestRow, ...] | None = None
    """The most recently finished requests, newest first."""
    timeline: RequestTimeline | None = None
    block_map: BlockMap | None = None
    moe: MoeSection | None = None
    """An MoE model's routing load per (layer, expert); None for a dense model (and from
    daemons that predate it)."""
    snapshot_version: int = SNAPSHOT_VERSION

    @classmethod
    def of(
        cls,
        time: float,
        daemon: DaemonSection,
        metrics: MetricsSections,
        queue: QueueCounts | None = None,
        kv: KVUsage | None = None,
        grammar: GrammarSection | None = None,
    ) -> StatsSnapshot:
        """A snapshot of the daemon's facts and measured sections (and the engine's counts)."""
        return cls(time=time, daemon=daemon, **vars(metrics), queue=queue, kv=kv, grammar=grammar)

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
