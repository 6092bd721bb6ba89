"""Random paged KV caches for attention kernel tests, with NaN wherever nothing was written.

Blocks are shuffled across sequences and block 0 is never handed out, so a kernel that
reads a padding block-table entry (0), a slot past a context or a wrong block hits NaN
or another sequence's data and fails its comparison with the reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class PagedKV:
    """A filled paged cache and the tables that locate each sequence's tokens in it."""

    k_cache: torch.Tensor  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor  # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables: torch.Tensor  # [num_seqs, max_blocks_per_seq] int32, padding 0
    seq_lens: torch.Tensor  # [num_seqs] int32


def make_paged_kv(
    seq_lens: list[int],
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    device: str,
    seed: int = 0,
    extra_table_blocks: int = 1,
) -> PagedKV:
    """Caches holding random K/V for positions < seq_len of each sequence, NaN elsewhere."""
    generator = torch.Generator().manual_seed(seed)
    blocks_per_seq = [math.ceil(seq_len / block_size) for seq_len in seq_lens]
    num_blocks = sum(blocks_per_seq) + 2  # block 0 and one spare stay all-NaN
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype)
    v_cache = torch.full(shape, float("nan"), dtype=dtype)
    shuffled_ids = (torch.randperm(num_blocks - 1, generator=generator) + 1).tolist()
    max_blocks = max(blocks_per_seq, default=0) + extra_table_blocks
    block_tables = torch.zeros((len(seq_lens), max_blocks), dtype=torch.int32)
    for seq_idx, (seq_len, num_seq_blocks) in enumerate(zip(seq_lens, blocks_per_seq)):
        block_ids = torch.tensor(
            [shuffled_ids.pop() for _ in range(num_seq_blocks)], dtype=torch.long
        )
        block_tables[seq_idx, :num_seq_blocks] = block_ids
        positions = torch.arange(seq_len)
        slots = (block_ids[positions // block_size], positions % block_size)
        k_cache[slots] = torch.randn(seq_len, num_kv_heads, head_dim, generator=generator).to(dtype)
        v_cache[slots] = torch.randn(seq_len, num_kv_heads, head_dim, generator=generator).to(dtype)
    return PagedKV(
        k_cache=k_cache.to(device),
        v_cache=v_cache.to(device),
        block_tables=block_tables.to(device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
    )
