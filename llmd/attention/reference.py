"""Slow, obviously-correct paged attention and a metadata builder for backend tests.

Every backend (torch, Triton) is checked against the same loop-per-token reference over the
same randomly placed block tables, so a kernel test needs no model and no runner.
"""

from __future__ import annotations

import itertools
import math

import torch

from llmd.attention.metadata import AttentionMetadata
from llmd.errors import InvalidParameterError


def naive_paged_attention(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    metadata: AttentionMetadata,
    scale: float,
) -> torch.Tensor:  # [num_tokens, num_heads, head_dim], query's dtype
    """Attend each query token over the cache, one sequence and token at a time, in float64.

    The new tokens' K/V must already be in the cache (a backend writes them first).
    """
    num_heads = query.shape[1]
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group_size = num_heads // num_kv_heads
    block_tables = metadata.block_tables.tolist()
    out = torch.empty(query.shape, dtype=torch.float64, device=query.device)
    row = 0
    for seq_index, (query_len, seq_len) in enumerate(
        zip(metadata.query_lens_cpu, metadata.seq_lens_cpu, strict=True)
    ):
        # Contiguous context K/V, read one position at a time through the block table.
        keys = []
        values = []
        for position in range(seq_len):
            block_id = block_tables[seq_index][position // block_size]
            keys.append(k_cache[block_id, position % block_size])
            values.append(v_cache[block_id, position % block_size])
        seq_keys = torch.stack(keys).double()  # [seq_len, num_kv_heads, head_dim]
        seq_values = torch.stack(values).double()
        for token in range(query_len):
            position = seq_len - query_len + token
            for head in range(num_heads):
                kv_head = head // group_size
                q = query[row + token, head].double()  # [head_dim]
                scores = seq_keys[: position + 1, kv_head] @ q * scale  # [position + 1]
                probs = torch.softmax(scores, dim=0)
                out[row + token, head] = probs @ seq_values[: position + 1, kv_head]
        row += query_len
    return out.to(query.dtype)


def build_metadata(
    query_lens: list[int],
    seq_lens: list[int],
    block_size: int,
    num_blocks: int,
    device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
    num_decode_seqs: int | None = None,
    block_ids_per_seq: list[list[int]] | None = None,
) -> tuple[AttentionMetadata, list[list[int]]]:
    """Metadata for sequences with these query/context lengths on randomly placed blocks.

    Blocks are a random permutation split between sequences (no sharing), so a backend that
    reads the wrong block or slot gets someone else's data. Decodes are the leading
    sequences with query length 1 unless `num_decode_seqs` says otherwise. Pass
    `block_ids_per_seq` (e.g. from a previous step) to keep sequences on their blocks.
    """
    if len(query_lens) != len(seq_lens) or not query_lens:
        raise InvalidParameterError("need one query length per sequence", "query_lens")
    for query_len, seq_len in zip(query_lens, seq_lens, strict=True):
        if not 1 <= query_len <= seq_len:
            raise InvalidParameterError(
                f"need 1 <= query_len <= seq_len, got {query_len}, {seq_len}", "query_lens"
            )
    blocks_per_seq = [math.ceil(seq_len / block_size) for seq_len in seq_lens]
    if num_decode_seqs is None:
        num_decode_seqs = sum(1 for _ in itertools.takewhile(lambda n: n == 1, query_lens))
    if block_ids_per_seq is None:
        block_ids_per_seq = _random_block_ids(blocks_per_seq, num_blocks, generator)
    for block_ids, num_seq_blocks in zip(block_ids_per_seq, blocks_per_seq, strict=True):
        if len(block_ids) < num_seq_blocks:
            raise InvalidParameterError(
                f"a sequence needs {num_seq_blocks} blocks, got {len(block_ids)}",
                "block_ids_per_seq",
            )

    slots = []
    for query_len, seq_len, block_ids in zip(query_lens, seq_lens, block_ids_per_seq, strict=True):
        for position in range(seq_len - query_len, seq_len):
            slots.append(block_ids[position // block_size] * block_size + position % block_size)
    max_blocks = max(len(ids) for ids in block_ids_per_seq)
    padded_tables = [ids + [0] * (max_blocks - len(ids)) for ids in block_ids_per_seq]
    query_starts = [0, *itertools.accumulate(query_lens)]
    metadata = AttentionMetadata(
        num_decode_seqs=num_decode_seqs,
        num_prefill_seqs=len(query_lens) - num_decode_seqs,
        num_tokens=sum(query_lens),
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        query_start_loc=torch.tensor(query_starts, dtype=torch.int32, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        block_tables=torch.tensor(padded_tables, dtype=torch.int32, device=device),
        max_query_len=max(query_lens),
        max_seq_len=max(seq_lens),
        query_lens_cpu=list(query_lens),
        seq_lens_cpu=list(seq_lens),
    )
    return metadata, block_ids_per_seq


def _random_block_ids(
    blocks_per_seq: list[int], num_blocks: int, generator: torch.Generator | None
) -> list[list[int]]:
    """Give each sequence its own blocks, drawn from a random permutation of the pool."""
    if sum(blocks_per_seq) > num_blocks:
        raise InvalidParameterError(
            f"{sum(blocks_per_seq)} blocks needed, only {num_blocks}", "num_blocks"
        )
    permutation = torch.randperm(num_blocks, generator=generator).tolist()
    block_ids_per_seq = []
    next_block = 0
    for num_seq_blocks in blocks_per_seq:
        block_ids_per_seq.append(permutation[next_block : next_block + num_seq_blocks])
        next_block += num_seq_blocks
    return block_ids_per_seq
