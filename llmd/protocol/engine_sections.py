"""The engine's sections of a stats snapshot: its facts, queue, KV pool, rows and timelines.

Defined with the protocol, not the engine, because both ends use them: the engine builds
them between steps (frozen copies, safe on any thread) and `llmd top`, `llmd status` and
`/metrics` read their fields after the snapshot crossed the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmd.protocol.wire_data import WireData
from llmd.wait_breakdown import WaitBreakdown

ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1}
"""Bytes per element of the dtypes a model or KV cache may hold, by config name."""


@dataclass(frozen=True)
class EngineFacts(WireData):
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
    kv_cache_dtype: str = field(default="", kw_only=True)
    """The KV cache's element type (float32, bfloat16, float8_e4m3fn); "" from a daemon
    that predates the field, whose cache held the model's dtype."""
    num_experts: int = field(default=0, kw_only=True)
    """Routed experts per MoE layer; 0 for a dense model (and from older daemons)."""
    num_experts_per_token: int = field(default=0, kw_only=True)
    num_moe_layers: int = field(default=0, kw_only=True)
    num_params_per_expert: int = field(default=0, kw_only=True)
    """Parameters of one routed expert (gate, up, down)."""
    quantization: str = field(default="", kw_only=True)
    """The checkpoint's weight quantization (e.g. "compressed-tensors w4a16-g128"); "" for
    dense weights or a daemon that predates the field."""
    weight_bytes: int = field(default=0, kw_only=True)
    """Bytes of the loaded weights (quantized codes and scales included); 0 from a daemon
    that predates the field."""

    @property
    def kv_dtype(self) -> str:
        """The KV cache's element type, the model's where the daemon did not say."""
        return self.kv_cache_dtype or self.dtype

    @property
    def kv_token_bytes(self) -> int:
        """KV-cache bytes one token takes across all layers, in the cache's own dtype."""
        return self.kv_bytes_per_token(ELEMENT_BYTES.get(self.kv_dtype, 4))

    def kv_bytes_per_token(self, element_size: int) -> int:
        """KV-cache bytes one token takes across all layers (keys and values)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * element_size


@dataclass(frozen=True)
class QueueCounts(WireData):
    """How many requests wait and run, and how many preemptions there were since start."""

    waiting: int
    running: int
    preempted: int
    """Of the waiting, those preempted that await recomputation."""
    preemptions_total: int


@dataclass(frozen=True)
class KVUsage(WireData):
    """The KV pool's blocks by state and the prefix cache's hits since start."""

    block_size: int
    num_total: int
    num_used: int
    """Blocks referenced by a live request."""
    num_cached: int
    """Unreferenced blocks that hold a reusable prefix."""
    num_free: int
    prefix_query_tokens: int
    prefix_hit_tokens: int

    @property
    def usage(self) -> float:
        """Share of the pool held by live requests."""
        return self.num_used / self.num_total if self.num_total else 0.0

    @property
    def prefix_hit_rate(self) -> float | None:
        """Share of looked-up prompt tokens served from the cache (None: none looked up)."""
        if not self.prefix_query_tokens:
            return None
        return self.prefix_hit_tokens / self.prefix_query_tokens

    def to_wire(self) -> dict[str, object]:
        """The fields plus `usage` and `prefix_hit_rate`, for readers without this class."""
        return {**super().to_wire(), "usage": self.usage, "prefix_hit_rate": self.prefix_hit_rate}


@dataclass(frozen=True)
class RequestRow(WireData):
    """One row of the request table: a live or recently finished request, as of now."""

    request_id: str
    label: str | None
    """The client's name for the request (an HTTP X-Request-Id)."""
    state: str
    """waiting, running, preempted or finished."""
    waiting_on: str | None
    """The wait reason holding a waiting or preempted request now."""
    wait_s: float
    finish_reason: str | None
    priority: int
    num_prompt_tokens: int
    num_generated_tokens: int
    max_tokens: int
    num_computed_tokens: int
    num_cached_tokens: int
    num_blocks: int
    num_preemptions: int
    prefill_progress: float
    decode_progress: float
    """Generated tokens over max_tokens."""
    age_s: float
    """Since arrival (to finish, once finished)."""
    ttft_s: float | None
    client_id: str | None = None
    """The client's `id` of the generate; set by the daemon, None for finished rows."""

    @property
    def is_finished(self) -> bool:
        """True for a recently finished request's row."""
        return self.state == "finished"


@dataclass(frozen=True)
class RequestTimeline(WireData):
    """A request's lifecycle in seconds since its arrival, and why it waited."""

    request_id: str
    label: str | None
    state: str
    waiting_on: str | None
    waits: WaitBreakdown
    age_s: float
    first_scheduled_s: float | None
    first_token_s: float | None
    finished_s: float | None
    events: tuple[tuple[float, str, int], ...]
    """(seconds, kind, tokens) of the newest events; kind is prefill or preempted."""
    token_times_s: tuple[float, ...]
    """Each of the newest output tokens' time since arrival."""
    num_tokens_total: int


@dataclass(frozen=True)
class BlockMap(WireData):
    """The KV pool downsampled to cells and run-length encoded (see `llmd.metrics.block_map`).

    A cell's code is an index into `owners`, or one of `codes`' values (free, cached, shared).
    """

    num_blocks: int
    blocks_per_cell: int
    num_cells: int
    runs: tuple[int, ...]
    """Flat [code, count, code, count, ...] over the cells."""
    owners: tuple[str, ...] = ()
    """Engine request ids: code k >= 0 means owners[k] holds the block."""
    codes: dict[str, int] | None = None
    """{"free": -1, "cached": -2, "shared": -3}."""

    def cells(self) -> list[int]:
        """The code of every cell, expanded from the runs."""
        cells: list[int] = []
        for index in range(0, len(self.runs) - 1, 2):
            cells.extend([self.runs[index]] * self.runs[index + 1])
        return cells
