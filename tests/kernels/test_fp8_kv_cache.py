"""The paged kernels on an fp8 e4m3 KV cache: the store's bytes and attention's read-back.

The store must round exactly as torch does (what the CPU op and `kv_store_reference`
store), and decode and prefill must match the fp32 reference on the dequantized cache,
with NaN bytes in every slot that no sequence owns and scales other than 1.
"""

from __future__ import annotations

import pytest
import torch

from llmd.errors import InvalidParameterError
from llmd.kernels.decode_attention import decode_attention, decode_attention_reference
from llmd.kernels.kv_store import kv_store, kv_store_reference
from llmd.kernels.prefill_attention import prefill_attention, prefill_attention_reference
from tests.kernels.paged_cases import make_paged_kv
from tests.kernels.tolerances import attention_tolerance

FP8 = torch.float8_e4m3fn
K_SCALE, V_SCALE = 0.5, 4.0


def quantized(cache: torch.Tensor, scale: float) -> torch.Tensor:
    """What an fp8 cache holds for `cache`: value / scale, saturated at +-448, nearest even."""
    return (cache.float() / scale).clamp(-448, 448).to(FP8)


def every_e4m3_edge() -> torch.Tensor:
    """Values that probe the rounding: random magnitudes over 1e-4..1e3, every e4m3 value
    and the midpoints between neighbours (ties), subnormals, zeros, +-inf and NaN."""
    generator = torch.Generator().manual_seed(0)
    spread = torch.randn(2048, generator=generator) * torch.logspace(-4, 3, 2048)
    codes = torch.arange(127, dtype=torch.int32).to(torch.uint8).view(FP8).float()  # >= 0
    ties = (codes[1:] + codes[:-1]) / 2
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 500.0])
    values = torch.cat([spread, codes, -codes, ties, -ties, special])
    return values[: values.numel() // 64 * 64]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("scale", [1.0, 0.5, 3.0])
def test_the_store_rounds_like_torch_bit_for_bit(device, dtype, scale):
    values = every_e4m3_edge().to(dtype).view(-1, 2, 32)  # [tokens, kv_heads, head_dim]
    num_tokens = values.shape[0]
    slots = torch.randperm(num_tokens + 8, generator=torch.Generator().manual_seed(1))
    slots = slots[:num_tokens]
    slots[[0, 5]] = -1  # padding tokens store nothing
    shape = (num_tokens // 4 + 3, 4, 2, 32)
    nan_cache = torch.full(shape, float("nan")).to(FP8)
    k_cache, v_cache = nan_cache.clone().to(device), nan_cache.clone().to(device)
    k_want, v_want = nan_cache.clone(), nan_cache.clone()
    kv_store(values.to(device), values.to(device), k_cache, v_cache, slots.to(device),
             scale, 2 * scale)  # fmt: skip
    kv_store_reference(values, values, k_want, v_want, slots, scale, 2 * scale)
    assert torch.equal(k_cache.cpu().view(torch.uint8), k_want.view(torch.uint8))
    assert torch.equal(v_cache.cpu().view(torch.uint8), v_want.view(torch.uint8))
    assert (k_want.view(torch.uint8) == 0x7E).any()  # saturated at 448


def _fp8_case(seq_lens, block_size, num_kv_heads, head_dim, device):
    """A random paged batch quantized to fp8 with K_SCALE / V_SCALE; NaN (0x7F) elsewhere."""
    paged = make_paged_kv(seq_lens, block_size, num_kv_heads, head_dim, torch.float32, "cpu")
    k_cache = quantized(paged.k_cache * 3, K_SCALE)  # keys of +-12: well inside e4m3's range
    v_cache = quantized(paged.v_cache * 500, V_SCALE)  # values reach 448 * V_SCALE: saturate
    assert (v_cache.view(torch.uint8) & 0x7F == 0x7E).any()
    assert (k_cache.view(torch.uint8) == 0x7F).any()  # unused slots hold NaN
    return paged, k_cache.to(device), v_cache.to(device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_splits", [1, 3])
def test_decode_reads_the_fp8_cache_back_scaled(device, dtype, num_splits):
    paged, k_cache, v_cache = _fp8_case([1, 16, 17, 50], 16, 2, 64, device)
    query = torch.randn(4, 8, 64, generator=torch.Generator().manual_seed(2)).to(device, dtype)
    args = (
        query,
        k_cache,
        v_cache,
        paged.block_tables.to(device),
        paged.seq_lens.to(device),
        0.125,
    )
    out = decode_attention(*args, k_scale=K_SCALE, v_scale=V_SCALE, num_splits=num_splits,
                           split_tokens=8)  # fmt: skip
    expected = decode_attention_reference(*args, K_SCALE, V_SCALE)
    assert torch.isfinite(out.float()).all(), "read a NaN slot (padding or past a context)"
    magnitude = expected.float().abs().max().item()  # values reach ~2000
    tolerance = attention_tolerance(dtype)
    torch.testing.assert_close(out.float(), expected.float(), rtol=tolerance["rtol"],
                               atol=tolerance["atol"] * magnitude)  # fmt: skip
    unscaled = decode_attention(*args, num_splits=num_splits, split_tokens=8)
    assert not torch.allclose(unscaled.float(), out.float())  # the scales were applied


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prefill_with_a_cached_prefix_reads_the_fp8_cache_back_scaled(device, dtype):
    # A fresh prompt, a chunk after a 30-token prefix and a chunk starting mid-block.
    seq_lens, query_lens = [9, 36, 33], [9, 6, 20]
    paged, k_cache, v_cache = _fp8_case(seq_lens, 16, 2, 64, device)
    starts = torch.tensor([0, 9, 15, 35], dtype=torch.int32, device=device)
    query = torch.randn(35, 4, 64, generator=torch.Generator().manual_seed(3)).to(device, dtype)
    args = (query, k_cache, v_cache, paged.block_tables.to(device), paged.seq_lens.to(device),
            starts)  # fmt: skip
    out = prefill_attention(*args, max(query_lens), 0.125, k_scale=K_SCALE, v_scale=V_SCALE)
    expected = prefill_attention_reference(*args, 0.125, K_SCALE, V_SCALE)
    assert torch.isfinite(out.float()).all()
    magnitude = expected.float().abs().max().item()
    tolerance = attention_tolerance(dtype)
    torch.testing.assert_close(out.float(), expected.float(), rtol=tolerance["rtol"],
                               atol=tolerance["atol"] * magnitude)  # fmt: skip


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan"), True, "1"])
def test_bad_scales_are_refused_by_name(bad, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # CPU tensors are valid: only the scale is bad
    paged, k_cache, v_cache = _fp8_case([5], 16, 1, 64, "cpu")
    query = torch.zeros(1, 1, 64)
    args = (query, k_cache, v_cache, paged.block_tables, paged.seq_lens, 0.125)
    with pytest.raises(InvalidParameterError) as error:
        decode_attention(*args, k_scale=bad)
    assert error.value.parameter == "k_scale"
    with pytest.raises(InvalidParameterError) as error:
        kv_store(query, query, k_cache, v_cache, torch.zeros(1).long(), 1.0, bad)
    assert error.value.parameter == "v_scale"


def test_an_fp8_key_cache_with_another_value_cache_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # CPU tensors are valid: only v_cache is bad
    paged, k_cache, _ = _fp8_case([5], 16, 1, 64, "cpu")
    v_cache = torch.zeros(k_cache.shape)
    query = torch.zeros(1, 1, 64)
    with pytest.raises(InvalidParameterError) as error:
        decode_attention(query, k_cache, v_cache, paged.block_tables, paged.seq_lens, 0.125)
    assert error.value.parameter == "v_cache"
