"""What the torch references of the paged attention kernels share: one sequence's context.

Decode and prefill attention read K/V the same way, through a block table; their slow,
obviously correct references gather it here the same way, so they differ only in the
queries that attend and the causal mask.
"""

from __future__ import annotations

import torch


def context_kv(
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables: torch.Tensor,  # [num_seqs, max_blocks_per_seq]
    seq_idx: int,
    seq_len: int,
    num_heads: int,
    kv_scales: tuple[float, float] = (1.0, 1.0),
) -> tuple[torch.Tensor, torch.Tensor]:  # keys, values: [seq_len, num_heads, head_dim] fp32
    """The first `seq_len` cached keys and values of sequence `seq_idx`, in fp32 times
    `kv_scales` (k_scale, v_scale), each KV head repeated for its GQA group's query heads."""
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group_size = num_heads // num_kv_heads
    positions = torch.arange(seq_len, device=k_cache.device)
    block_ids = block_tables[seq_idx, positions // block_size].long()
    keys = k_cache[block_ids, positions % block_size].float() * kv_scales[0]  # [seq, kvh, d]
    values = v_cache[block_ids, positions % block_size].float() * kv_scales[1]
    return keys.repeat_interleave(group_size, dim=1), values.repeat_interleave(group_size, dim=1)
