"""What the engine tells whoever serves it: facts fixed at start-up and its live state now.

Frozen plain data that `LLMEngine.facts()` and `LLMEngine.snapshot()` build, so the daemon
reads no scheduler, block-manager or runner internals and may hand the result to any
thread; pure standard library, like the rest of the control plane.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmd.engine.request_view import RequestRow, RequestTimeline


@dataclass(frozen=True)
class EngineFacts:
    """What does not change while the engine serves: model, device, limits, KV pool."""

    model: str
    device: str
    dtype: str
    device_name: str
    """The GPU's name, or "cpu"."""
    max_model_len: int
    num_params: int
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    is_tied: bool
    """True when the output projection shares the input embedding table."""
    scheduling_policy: str
    max_num_batched_tokens: int
    """The scheduler's resolved token budget (at least max_model_len without chunking)."""
    max_num_seqs: int
    block_size: int
    num_blocks: int
    attention_backend: str
    async_scheduling: bool

    def kv_bytes_per_token(self, element_size: int) -> int:
        """KV-cache bytes one token takes across all layers (keys and values)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * element_size


@dataclass(frozen=True)
class QueueCounts:
    """How many requests wait and run, and how many preemptions there were since start."""

    waiting: int
    running: int
    preempted: int
    """Of the waiting, those preempted that await recomputation."""
    preemptions_total: int

    def to_dict(self) -> dict[str, Any]:
        """The snapshot's "queue" section (docs/protocol.md)."""
        return {
            "waiting": self.waiting,
            "running": self.running,
            "preempted": self.preempted,
            "preemptions_total": self.preemptions_total,
        }


@dataclass(frozen=True)
class KVUsage:
    """The KV pool's blocks by state and the prefix cache's hits since start."""

    block_size: int
    num_total: int
    num_used: int
    num_cached: int
    num_free: int
    prefix_query_tokens: int
    prefix_hit_tokens: int

    @property
    def usage(self) -> float:
        """Share of the pool held by live requests."""
        return self.num_used / self.num_total

    @property
    def prefix_hit_rate(self) -> float | None:
        """Share of looked-up prompt tokens served from the cache (None: none looked up)."""
        if not self.prefix_query_tokens:
            return None
        return self.prefix_hit_tokens / self.prefix_query_tokens

    def to_dict(self) -> dict[str, Any]:
        """The snapshot's "kv" section (docs/protocol.md)."""
        return {
            "block_size": self.block_size,
            "num_total": self.num_total,
            "num_used": self.num_used,
            "num_cached": self.num_cached,
            "num_free": self.num_free,
            "usage": self.usage,
            "prefix_query_tokens": self.prefix_query_tokens,
            "prefix_hit_tokens": self.prefix_hit_tokens,
            "prefix_hit_rate": self.prefix_hit_rate,
        }


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
