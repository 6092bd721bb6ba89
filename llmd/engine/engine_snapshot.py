"""What the engine tells whoever serves it: facts fixed at start-up and its live state now.

Frozen plain data that `LLMEngine.facts()` and `LLMEngine.snapshot()` build, so the daemon
reads no scheduler, block-manager or runner internals and may hand the result to any
thread. What of it a snapshot carries on the wire (the facts, queue, KV, rows, timelines)
are the protocol's own types (`llmd.protocol.engine_sections`), re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmd.protocol.engine_sections import (
    EngineFacts,
    KVUsage,
    QueueCounts,
    RequestRow,
    RequestTimeline,
)
from llmd.protocol.grammar_section import GrammarSection
from llmd.protocol.moe_section import MoeSection


@dataclass(frozen=True)
class BlockMapCopy:
    """What a block map is built from, copied in O(running + cached) time, not per block."""

    num_blocks: int
    cached_block_ids: tuple[int, ...]
    """Every block that holds a prefix-cache hash."""
    block_tables: tuple[tuple[str, tuple[int, ...]], ...]
    """(request id, block ids) of each running request holding blocks."""


@dataclass(frozen=True)
class Prefilling:
    """A running request whose prompt is still being prefilled in chunks."""

    request_id: str
    num_computed_tokens: int
    num_prompt_tokens: int


@dataclass(frozen=True)
class SnapshotScope:
    """Which optional, costlier parts a snapshot includes."""

    include_requests: bool = False
    """The request table: the oldest `max_requests` live requests and the recent ones."""
    max_requests: int = 64
    timeline_request_ids: tuple[str, ...] = ()
    """Requests (live or recent) whose full timeline to include."""
    include_block_map: bool = False
    include_backlog: bool = False
    """The prefill tokens still to compute over every queued request (O(queued))."""


@dataclass(frozen=True)
class EngineSnapshot:
    """The engine's live state between two steps; the optional parts as `SnapshotScope` says."""

    queue: QueueCounts
    kv: KVUsage
    prefilling: tuple[Prefilling, ...]
    """Running requests whose prompt is partly computed (none generated yet)."""
    num_requests: int
    """Live requests (waiting or running)."""
    requests: tuple[RequestRow, ...] | None = None
    """The oldest live requests, oldest first (None unless asked)."""
    recent: tuple[RequestRow, ...] | None = None
    """The recently finished requests it was given, newest first (None unless asked)."""
    timelines: tuple[tuple[str, RequestTimeline | None], ...] = ()
    """(request id, its timeline or None when unknown) for each asked-for id."""
    block_map: BlockMapCopy | None = None
    backlog_tokens: int | None = None
    """Prompt tokens still to prefill over every waiting and running request (if asked)."""
    grammar: GrammarSection = field(default_factory=GrammarSection)
    """Structured outputs: constrained requests, compiles and the compile queue now."""
    moe: MoeSection | None = None
    """An MoE model's routing load per expert (None for a dense model)."""


__all__ = [
    "BlockMapCopy",
    "EngineFacts",
    "EngineSnapshot",
    "GrammarSection",
    "KVUsage",
    "MoeSection",
    "Prefilling",
    "QueueCounts",
    "SnapshotScope",
]
