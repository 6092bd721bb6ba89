"""The torch paged-attention backend against the naive per-token reference.

Blocks are placed randomly and every unused slot holds NaN, so reading a wrong slot or
letting a masked position leak into a softmax shows up as a mismatch or a NaN.
"""

from __future__ import annotations

import pytest
import torch

from llmd.attention.inputs import AttentionInputs
from llmd.attention.reference import build_metadata, naive_paged_attention
from llmd.attention.torch_backend import TorchAttentionBackend

BLOCK_SIZE = 4
HEAD_DIM = 16
NUM_BLOCKS = 64

# (query_lens, seq_lens, num_decode_seqs): decodes first, then prefill chunks.
BATCHES = {
    "decodes": ([1, 1, 1, 1, 1], [1, 4, 5, 8, 13], 5),
    "prefills": ([4, 7, 1, 9], [4, 7, 9, 16], 0),
    "mixed": ([1, 1, 1, 5, 3, 8, 1], [1, 9, 12, 5, 11, 8, 6], 3),
}


def make_case(query_lens, seq_lens, num_decode_seqs, num_heads, num_kv_heads, device):
    """Random q/k/v (strided rows, as models pass them), NaN caches with cached prefixes."""
    generator = torch.Generator().manual_seed(0)
    metadata, block_ids_per_seq = build_metadata(
        query_lens,
        seq_lens,
        BLOCK_SIZE,
        NUM_BLOCKS,
        device=device,
        generator=generator,
        num_decode_seqs=num_decode_seqs,
    )
    num_tokens = sum(query_lens)
    qkv = torch.randn(num_tokens, num_heads + 2 * num_kv_heads, HEAD_DIM, generator=generator)
    qkv = qkv.to(device)
    query = qkv[:, :num_heads]
    key = qkv[:, num_heads : num_heads + num_kv_heads]
    value = qkv[:, num_heads + num_kv_heads :]
    cache_shape = (NUM_BLOCKS, BLOCK_SIZE, num_kv_heads, HEAD_DIM)
    k_cache = torch.full(cache_shape, float("nan"), device=device)
    v_cache = torch.full(cache_shape, float("nan"), device=device)
    # Earlier steps' tokens: every position before this step's chunk is already cached.
    cached_slots = [
        block_ids[position // BLOCK_SIZE] * BLOCK_SIZE + position % BLOCK_SIZE
        for query_len, seq_len, block_ids in zip(query_lens, seq_lens, block_ids_per_seq)
        for position in range(seq_len - query_len)
    ]
    cached_slots = torch.tensor(cached_slots, dtype=torch.int64, device=device)
    for cache in (k_cache, v_cache):
        values = torch.randn(len(cached_slots), num_kv_heads, HEAD_DIM, generator=generator)
        cache.view(-1, num_kv_heads, HEAD_DIM)[cached_slots] = values.to(device)
    return metadata, query, key, value, k_cache, v_cache, cached_slots


def check_backend(batch, num_heads, num_kv_heads, device):
    query_lens, seq_lens, num_decode_seqs = BATCHES[batch]
    metadata, query, key, value, k_cache, v_cache, cached_slots = make_case(
        query_lens, seq_lens, num_decode_seqs, num_heads, num_kv_heads, device
    )
    cached_k = k_cache.view(-1, num_kv_heads, HEAD_DIM)[cached_slots].clone()
    scale = HEAD_DIM**-0.5

    out = TorchAttentionBackend().forward(
        AttentionInputs(query, key, value, k_cache, v_cache, metadata, scale)
    )

    k_slots = k_cache.view(-1, num_kv_heads, HEAD_DIM)
    v_slots = v_cache.view(-1, num_kv_heads, HEAD_DIM)
    torch.testing.assert_close(k_slots[metadata.slot_mapping], key, atol=0, rtol=0)
    torch.testing.assert_close(v_slots[metadata.slot_mapping], value, atol=0, rtol=0)
    torch.testing.assert_close(k_slots[cached_slots], cached_k, atol=0, rtol=0)
    num_written = int((~k_slots.isnan().all(dim=-1).all(dim=-1)).sum())
    assert num_written == sum(seq_lens)  # nothing outside the contexts was touched

    assert out.shape == query.shape and out.dtype == query.dtype
    assert not out.isnan().any()
    expected = naive_paged_attention(query, k_cache, v_cache, metadata, scale)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("batch", list(BATCHES))
@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(4, 4), (8, 2)])
def test_matches_reference_on_cpu(batch, num_heads, num_kv_heads):
    check_backend(batch, num_heads, num_kv_heads, torch.device("cpu"))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("batch", list(BATCHES))
def test_matches_reference_on_cuda(batch):
    check_backend(batch, 8, 2, torch.device("cuda"))


def test_bfloat16_cache_stays_close_to_float32():
    query_lens, seq_lens, num_decode_seqs = BATCHES["mixed"]
    metadata, query, key, value, k_cache, v_cache, _ = make_case(
        query_lens, seq_lens, num_decode_seqs, 8, 2, torch.device("cpu")
    )
    backend, scale = TorchAttentionBackend(), HEAD_DIM**-0.5
    expected = backend.forward(
        AttentionInputs(query, key, value, k_cache, v_cache, metadata, scale)
    )
    out = backend.forward(
        AttentionInputs(
            query.bfloat16(),
            key.bfloat16(),
            value.bfloat16(),
            k_cache.bfloat16(),
            v_cache.bfloat16(),
            metadata,
            scale,
        )
    )
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), expected, atol=3e-2, rtol=3e-2)
