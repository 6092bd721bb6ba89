"""TritonAttentionBackend against the torch backend and the naive reference."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from llmd.attention.inputs import AttentionInputs
from llmd.attention.reference import build_metadata, naive_paged_attention
from llmd.attention.torch_backend import TorchAttentionBackend
from tests.kernels.triton_env import (
    HAS_TRITON,
    device_params,
    enable_interpreter_without_cuda,
    skip_unless_runnable,
)

enable_interpreter_without_cuda()  # before llmd.kernels is imported (lazily, in the tests)

pytestmark = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")


@pytest.fixture(params=device_params())
def device(request) -> str:
    """Device to run on; skips where triton cannot run there."""
    skip_unless_runnable(request.param)
    return request.param


def _prefilled_caches(metadata, block_ids_per_seq, block_size, num_blocks, num_kv_heads,
                      head_dim, dtype, device, generator):  # fmt: skip
    """NaN caches holding random K/V at every cached position before this step's tokens."""
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype)
    v_cache = torch.full(shape, float("nan"), dtype=dtype)
    for query_len, seq_len, block_ids in zip(
        metadata.query_lens_cpu, metadata.seq_lens_cpu, block_ids_per_seq
    ):
        for position in range(seq_len - query_len):
            block_id, offset = block_ids[position // block_size], position % block_size
            k_cache[block_id, offset] = torch.randn(num_kv_heads, head_dim, generator=generator)
            v_cache[block_id, offset] = torch.randn(num_kv_heads, head_dim, generator=generator)
    return k_cache.to(device), v_cache.to(device)


def _step_inputs(num_tokens, num_heads, num_kv_heads, head_dim, dtype, device, generator):
    """Random query, key and value rows for one step."""
    return tuple(
        torch.randn(num_tokens, heads, head_dim, generator=generator).to(device=device, dtype=dtype)
        for heads in (num_heads, num_kv_heads, num_kv_heads)
    )


@pytest.mark.parametrize(
    ("num_heads", "num_kv_heads", "head_dim", "block_size", "dtype"),
    [(8, 2, 64, 16, torch.float32), (2, 2, 128, 32, torch.bfloat16)],
)
def test_mixed_batch_matches_torch_backend(
    device, num_heads, num_kv_heads, head_dim, block_size, dtype
):
    from llmd.attention.triton_backend import TritonAttentionBackend

    generator = torch.Generator().manual_seed(0)
    # Three decodes (a first token, a block boundary, a long context), then a whole prompt,
    # a chunk continuing a cached prefix and a chunk starting mid-block.
    query_lens = [1, 1, 1, 9, 4, 20]
    seq_lens = [1, block_size + 1, 70, 9, 36, 33]
    num_blocks = 20
    metadata, block_ids_per_seq = build_metadata(
        query_lens, seq_lens, block_size, num_blocks, device=device, generator=generator
    )
    assert metadata.num_decode_seqs == 3
    k_cache, v_cache = _prefilled_caches(
        metadata, block_ids_per_seq, block_size, num_blocks, num_kv_heads, head_dim, dtype,
        device, generator,
    )  # fmt: skip
    query, key, value = _step_inputs(
        metadata.num_tokens, num_heads, num_kv_heads, head_dim, dtype, device, generator
    )
    k_torch, v_torch = k_cache.clone(), v_cache.clone()
    scale = head_dim**-0.5

    out = TritonAttentionBackend().forward(
        AttentionInputs(query, key, value, k_cache, v_cache, metadata, scale)
    )
    expected = TorchAttentionBackend().forward(
        AttentionInputs(query, key, value, k_torch, v_torch, metadata, scale)
    )
    torch.testing.assert_close(k_cache, k_torch, atol=0, rtol=0, equal_nan=True)
    torch.testing.assert_close(v_cache, v_torch, atol=0, rtol=0, equal_nan=True)
    assert torch.isfinite(out.float()).all()
    tolerance = (
        {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}
    )
    torch.testing.assert_close(out, expected, **tolerance)
    naive = naive_paged_attention(query, k_cache, v_cache, metadata, scale)
    torch.testing.assert_close(out, naive, **tolerance)


def test_graph_style_decode_batch_with_padding(device):
    """Decode-only step shaped like a CUDA-graph bucket: wide block tables, a padding slot."""
    from llmd.attention.triton_backend import TritonAttentionBackend

    generator = torch.Generator().manual_seed(1)
    block_size, num_blocks, num_heads, num_kv_heads, head_dim = 16, 12, 4, 1, 64
    query_lens, seq_lens = [1, 1], [50, 33]
    metadata, block_ids_per_seq = build_metadata(
        query_lens, seq_lens, block_size, num_blocks, device=device, generator=generator
    )
    k_cache, v_cache = _prefilled_caches(
        metadata, block_ids_per_seq, block_size, num_blocks, num_kv_heads, head_dim,
        torch.float32, device, generator,
    )  # fmt: skip
    # Pad to a bucket of 3 sequences with 64-block-wide tables (a 1024-token bound, which
    # selects split-K): the padding sequence has seq_len 0 and slot -1.
    wide_tables = torch.zeros(3, 64, dtype=torch.int32, device=device)
    wide_tables[:2, : metadata.block_tables.shape[1]] = metadata.block_tables
    padded = dataclasses.replace(
        metadata,
        num_decode_seqs=3,
        num_tokens=3,
        slot_mapping=torch.cat([metadata.slot_mapping, metadata.slot_mapping.new_tensor([-1])]),
        query_start_loc=torch.arange(4, dtype=torch.int32, device=device),
        seq_lens=torch.cat([metadata.seq_lens, metadata.seq_lens.new_zeros(1)]),
        block_tables=wide_tables,
        query_lens_cpu=[1, 1, 1],
        seq_lens_cpu=[50, 33, 0],
    )
    query, key, value = _step_inputs(
        3, num_heads, num_kv_heads, head_dim, torch.float32, device, generator
    )
    nan_before = torch.isnan(k_cache).sum()
    out = TritonAttentionBackend().forward(
        AttentionInputs(query, key, value, k_cache, v_cache, padded, head_dim**-0.5)
    )
    stored = nan_before - torch.isnan(k_cache).sum()
    assert stored == 2 * num_kv_heads * head_dim, "stores exactly the two real tokens"
    expected = naive_paged_attention(query[:2], k_cache, v_cache, metadata, head_dim**-0.5)
    torch.testing.assert_close(out[:2], expected, atol=1e-5, rtol=1e-5)
    assert (out[2] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_fp8_cache_matches_the_reference_on_dequantized_kv_and_the_cpu_op(device, dtype):
    """kv_cache_dtype=fp8: the store writes key / k_scale and value / v_scale as e4m3 (the
    same bytes as the CPU op), NaN bytes in unused slots stay unread, and a mixed batch of
    decodes and prefill chunks over cached prefixes matches the reference on the caches
    multiplied back by their scales (and the CPU op's output on the same fp8 caches)."""
    from llmd.attention.triton_backend import TritonAttentionBackend

    generator = torch.Generator().manual_seed(4)
    block_size, num_blocks, num_heads, num_kv_heads, head_dim = 16, 20, 8, 2, 64
    query_lens, seq_lens = [1, 1, 1, 9, 4, 20], [1, 17, 70, 9, 36, 33]
    metadata, block_ids_per_seq = build_metadata(
        query_lens, seq_lens, block_size, num_blocks, device=device, generator=generator
    )
    k_cache, v_cache = _prefilled_caches(
        metadata, block_ids_per_seq, block_size, num_blocks, num_kv_heads, head_dim,
        torch.float32, device, generator,
    )  # fmt: skip
    k_scale, v_scale = 0.25, 3.0
    k8 = (k_cache / k_scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    v8 = (v_cache * 1000 / v_scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    query, key, value = _step_inputs(
        metadata.num_tokens, num_heads, num_kv_heads, head_dim, dtype, device, generator
    )
    value = value * 1000  # |value / v_scale| passes 448 for some draws: saturation
    k_before, v_before = k8.clone(), v8.clone()
    out = TritonAttentionBackend().forward(
        AttentionInputs(query, key, value, k8, v8, metadata, 0.125, k_scale, v_scale)
    )

    stored = {"k": k_before.view(torch.uint8), "v": v_before.view(torch.uint8)}
    for name, new, scale in (("k", key, k_scale), ("v", value, v_scale)):
        quantized = (new.float() / scale).clamp(-448, 448).to(torch.float8_e4m3fn)
        flat = stored[name].view(-1, num_kv_heads, head_dim)
        flat[metadata.slot_mapping.long()] = quantized.view(torch.uint8)
    assert torch.equal(k8.view(torch.uint8), stored["k"])
    assert torch.equal(v8.view(torch.uint8), stored["v"])
    assert (v8.view(torch.uint8) & 0x7F == 0x7E).any()  # saturated at 448
    assert (k8.view(torch.uint8) == 0x7F).any()  # unused slots still hold NaN

    assert out.dtype == dtype and torch.isfinite(out.float()).all()
    k_real, v_real = k8.float() * k_scale, v8.float() * v_scale
    expected = naive_paged_attention(query.float(), k_real, v_real, metadata, 0.125)
    magnitude = expected.abs().max().item()  # values reach ~1000: absolute error scales too
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.float(), expected.float(), atol=tolerance * magnitude,
                               rtol=tolerance)  # fmt: skip
    if device == "cpu":
        _check_against_the_cpu_op(out, query, key, value, k_before, v_before, k8, v8, metadata,
                                  k_scale, v_scale, tolerance * magnitude)  # fmt: skip


def _check_against_the_cpu_op(out, query, key, value, k_before, v_before, k8, v8, metadata,
                              k_scale, v_scale, atol):  # fmt: skip
    """The CPU op on the same fp8 caches stores the same bytes and attends alike."""
    from llmd.attention.cpu_backend import CpuAttentionBackend
    from llmd.attention.cpu_extension import CpuExtensionUnavailableError

    try:
        cpu_backend = CpuAttentionBackend()
    except CpuExtensionUnavailableError as error:
        pytest.skip(f"the CPU op cannot be built here: {error}")
    k_cpu = k_before.permute(0, 2, 3, 1).contiguous()  # the CPU backend's layout
    v_cpu = v_before.permute(0, 2, 1, 3).contiguous()
    cpu_out = cpu_backend.forward(
        AttentionInputs(query, key, value, k_cpu, v_cpu, metadata, 0.125, k_scale, v_scale)
    )
    assert torch.equal(k_cpu.permute(0, 3, 1, 2).view(torch.uint8), k8.view(torch.uint8))
    assert torch.equal(v_cpu.permute(0, 2, 1, 3).view(torch.uint8), v8.view(torch.uint8))
    torch.testing.assert_close(out.float(), cpu_out.float(), atol=atol, rtol=2e-2)
