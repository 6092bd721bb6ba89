"""Paged attention in plain torch: the reference backend and the CPU fast path.

It runs anywhere torch does (CPU, CUDA) with no compilation and reads K/V only through the
block tables, like the Triton kernels. Decodes run batched in a few chunks sized to stay in
the CPU cache, since fresh multi-megabyte gathers cost more than the attention math, and
the index tensors derived from the metadata are built once per step, not once per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from llmd.attention.backend import AttentionBackend
from llmd.attention.inputs import AttentionInputs
from llmd.attention.metadata import AttentionMetadata

DECODE_CHUNK_BYTES = 2 * 1024 * 1024
"""On CPU, decodes are gathered this many bytes of keys at a time (a few L2-sized chunks)."""


@dataclass
class _PrefillPlan:
    """Where one prefill chunk's rows are and which blocks and positions it reads."""

    rows: slice
    seq_len: int
    block_ids: torch.Tensor  # [num_blocks_used] int64
    is_visible: torch.Tensor | None  # [query_len, seq_len] bool; None: plain causal


@dataclass
class _StepPlan:
    """Index tensors derived from one step's metadata, shared by every layer."""

    metadata: AttentionMetadata
    block_size: int
    decode_slots: torch.Tensor | None  # [num_decodes, max_len] int64 cache slots
    decode_is_valid: torch.Tensor | None  # [num_decodes, max_len] bool
    prefills: list[_PrefillPlan]


class TorchAttentionBackend(AttentionBackend):
    """Writes new K/V by slot_mapping, then attends decodes batched and prefills per chunk."""

    name = "torch"

    def __init__(self) -> None:
        self._plan: _StepPlan | None = None

    def forward(self, inputs: AttentionInputs) -> torch.Tensor:
        """Store this step's K/V, then attend every query over its sequence's cached context."""
        query, metadata = inputs.query, inputs.metadata
        k_cache, v_cache = inputs.k_cache, inputs.v_cache
        num_kv_heads, head_dim = k_cache.shape[2], k_cache.shape[3]
        k_slots = k_cache.view(-1, num_kv_heads, head_dim)  # [num_slots, num_kv_heads, head_dim]
        v_slots = v_cache.view(-1, num_kv_heads, head_dim)
        k_slots.index_copy_(0, metadata.slot_mapping, inputs.key.to(k_slots.dtype))
        v_slots.index_copy_(0, metadata.slot_mapping, inputs.value.to(v_slots.dtype))

        plan = self._plan_for(metadata, k_cache.shape[1])
        out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
        if plan.decode_slots is not None:
            _decode_attention(query, k_slots, v_slots, plan, inputs.scale, out)
        for prefill in plan.prefills:
            out[prefill.rows] = _prefill_attention(
                query[prefill.rows], k_cache, v_cache, prefill, inputs.scale
            )
        return out

    def _plan_for(self, metadata: AttentionMetadata, block_size: int) -> _StepPlan:
        """The step's plan, built by the first layer and reused by the others.

        Plans are keyed by the metadata object itself: the runner builds a fresh
        AttentionMetadata every step and never mutates one in place.
        """
        plan = self._plan
        if plan is None or plan.metadata is not metadata or plan.block_size != block_size:
            plan = self._plan = _build_plan(metadata, block_size)
        return plan


def _build_plan(metadata: AttentionMetadata, block_size: int) -> _StepPlan:
    device = metadata.slot_mapping.device
    num_decodes = metadata.num_decode_seqs
    decode_slots = decode_is_valid = None
    if num_decodes > 0:
        max_len = max(metadata.seq_lens_cpu[:num_decodes])
        seq_lens = metadata.seq_lens[:num_decodes].long()  # [num_decodes]
        positions = torch.arange(max_len, device=device)  # [max_len]
        decode_is_valid = positions[None, :] < seq_lens[:, None]  # [num_decodes, max_len]
        # Padded positions read the sequence's own last token: written, hence finite.
        clamped = torch.minimum(positions[None, :], seq_lens[:, None] - 1)
        num_blocks_used = (max_len + block_size - 1) // block_size
        block_ids = metadata.block_tables[:num_decodes, :num_blocks_used].long()
        decode_slots = block_ids.gather(1, clamped // block_size) * block_size
        decode_slots += clamped % block_size

    prefills = []
    row = num_decodes
    for seq_index in range(num_decodes, metadata.num_seqs):
        query_len = metadata.query_lens_cpu[seq_index]
        seq_len = metadata.seq_lens_cpu[seq_index]
        num_blocks_used = (seq_len + block_size - 1) // block_size
        is_visible = None
        if query_len != seq_len:
            # A later chunk: row t sees positions <= seq_len - query_len + t.
            query_positions = torch.arange(seq_len - query_len, seq_len, device=device)
            key_positions = torch.arange(seq_len, device=device)
            is_visible = key_positions[None, :] <= query_positions[:, None]
        prefills.append(
            _PrefillPlan(
                rows=slice(row, row + query_len),
                seq_len=seq_len,
                block_ids=metadata.block_tables[seq_index, :num_blocks_used].long(),
                is_visible=is_visible,
            )
        )
        row += query_len
    return _StepPlan(metadata, block_size, decode_slots, decode_is_valid, prefills)


def _decode_attention(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]; decodes are the first rows
    k_slots: torch.Tensor,  # [num_slots, num_kv_heads, head_dim]
    v_slots: torch.Tensor,  # [num_slots, num_kv_heads, head_dim]
    plan: _StepPlan,
    scale: float,
    out: torch.Tensor,  # [num_tokens, num_heads, head_dim]; decode rows are written
) -> None:
    """One query per sequence against its padded context, many sequences per SDPA call.

    Padded positions hold finite copies of a real token and are masked by selection, so
    stale or NaN cache slots never reach the output.
    """
    num_decodes, max_len = plan.decode_slots.shape
    num_heads, head_dim = query.shape[1], query.shape[2]
    num_kv_heads = k_slots.shape[1]
    group_size = num_heads // num_kv_heads
    if query.device.type == "cpu":
        bytes_per_seq = max_len * num_kv_heads * head_dim * k_slots.element_size()
        chunk_size = max(1, DECODE_CHUNK_BYTES // bytes_per_seq)
    else:
        chunk_size = num_decodes
    for start in range(0, num_decodes, chunk_size):
        end = min(start + chunk_size, num_decodes)
        num_chunk = end - start
        chunk_slots = plan.decode_slots[start:end].reshape(-1)
        # [chunk, max_len, num_kv_heads, head_dim]
        keys = k_slots.index_select(0, chunk_slots).view(num_chunk, max_len, num_kv_heads, -1)
        values = v_slots.index_select(0, chunk_slots).view(num_chunk, max_len, num_kv_heads, -1)
        # Each kv head's query group acts as its "query rows": GQA without repeating K/V.
        grouped_query = query[start:end].view(num_chunk, num_kv_heads, group_size, head_dim)
        attended = F.scaled_dot_product_attention(
            grouped_query.to(keys.dtype),
            keys.transpose(1, 2),  # [chunk, num_kv_heads, max_len, head_dim]
            values.transpose(1, 2),
            attn_mask=plan.decode_is_valid[start:end, None, None, :],  # [chunk, 1, 1, max_len]
            scale=scale,
        )  # [chunk, num_kv_heads, group_size, head_dim]
        out[start:end] = attended.reshape(num_chunk, num_heads, head_dim)


def _prefill_attention(
    query: torch.Tensor,  # [query_len, num_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,
    prefill: _PrefillPlan,
    scale: float,
) -> torch.Tensor:  # [query_len, num_heads, head_dim]
    """Causal attention of one chunk over its cached prefix plus itself."""
    query_len, num_heads, head_dim = query.shape
    num_kv_heads = k_cache.shape[2]
    group_size = num_heads // num_kv_heads
    seq_len = prefill.seq_len
    # Only the first seq_len slots are read, so padding and stale slots never enter.
    keys = k_cache.index_select(0, prefill.block_ids).view(-1, num_kv_heads, head_dim)[:seq_len]
    values = v_cache.index_select(0, prefill.block_ids).view(-1, num_kv_heads, head_dim)[:seq_len]

    # [num_kv_heads, group_size, len, head_dim]: K/V broadcast over each kv head's group.
    grouped_query = query.view(query_len, num_kv_heads, group_size, head_dim).permute(1, 2, 0, 3)
    shape = (num_kv_heads, group_size, seq_len, head_dim)
    keys = keys.transpose(0, 1)[:, None].expand(shape)
    values = values.transpose(0, 1)[:, None].expand(shape)
    attended = F.scaled_dot_product_attention(
        grouped_query.to(keys.dtype),
        keys,
        values,
        attn_mask=prefill.is_visible,
        is_causal=prefill.is_visible is None,  # a whole prompt: SDPA can tile and skip
        scale=scale,
    )  # [num_kv_heads, group_size, query_len, head_dim]
    return attended.permute(2, 0, 1, 3).reshape(query_len, num_heads, head_dim)
