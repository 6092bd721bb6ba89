"""The C++ CPU layer ops (llmd/layers/csrc): RMSNorm, fused add + RMSNorm and in-place rotary
against the torch ops they replace, on the parallel and single-thread paths, strided views,
odd widths and bad input; and the layers that pick them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from llmd.attention.cpu_extension import load_cpu_ops
from llmd.layers.kernel_config import KernelConfig
from llmd.layers.norm import RMSNorm
from llmd.layers.rotary import apply_rotary


@pytest.fixture(scope="module")
def ops():
    """The extension, built (or loaded from the cache) once per module."""
    return load_cpu_ops()


# 300 x 576 is over the op's per-task grain (65,536 elements), so it runs split by rows.
SHAPES = [(1, 576), (7, 33), (64, 576), (300, 576)]


@pytest.mark.parametrize(("num_rows", "hidden_size"), SHAPES)
def test_rms_norm_matches_torch(ops, num_rows, hidden_size):
    torch.manual_seed(num_rows)
    hidden = torch.randn(num_rows, hidden_size) * 3
    weight = torch.randn(hidden_size)
    out = torch.full_like(hidden, float("nan"))
    ops.rms_norm(out, hidden, weight, 1e-6)
    torch.testing.assert_close(out, F.rms_norm(hidden, (hidden_size,), weight, 1e-6),
                               rtol=1e-6, atol=1e-6)  # fmt: skip


@pytest.mark.parametrize(("num_rows", "hidden_size"), SHAPES)
def test_fused_add_rms_norm_writes_the_sum_and_the_norm(ops, num_rows, hidden_size):
    torch.manual_seed(num_rows + 1)
    hidden, residual = torch.randn(num_rows, hidden_size), torch.randn(num_rows, hidden_size)
    weight = torch.randn(hidden_size)
    expected_sum = hidden + residual
    expected = F.rms_norm(expected_sum, (hidden_size,), weight, 1e-5)
    ops.fused_add_rms_norm(hidden, residual, weight, 1e-5)
    assert torch.equal(residual, expected_sum)
    torch.testing.assert_close(hidden, expected, rtol=1e-6, atol=1e-6)


def test_rms_norm_reads_strided_rows(ops):
    wide = torch.randn(9, 100)
    hidden = wide[:, 10:74]  # rows 100 floats apart
    weight = torch.rand(64)
    out = torch.empty(9, 64)
    ops.rms_norm(out, hidden, weight, 1e-6)
    torch.testing.assert_close(out, F.rms_norm(hidden, (64,), weight, 1e-6), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("num_tokens", [1, 5, 200])
def test_rotary_in_place_equals_torch_bit_for_bit_and_touches_only_its_heads(ops, num_tokens):
    torch.manual_seed(num_tokens)
    qkv = torch.randn(num_tokens, 9 + 3 + 3, 64)  # q heads, k heads, v heads
    angles = torch.rand(num_tokens, 32) * 6
    cos, sin = angles.cos(), angles.sin()
    expected = apply_rotary(qkv[:, :12], cos.unsqueeze(1), sin.unsqueeze(1))
    rotated = qkv.clone()
    ops.rotary_embedding(rotated[:, :12], cos, sin)  # a strided view into qkv
    assert torch.equal(rotated[:, :12], expected)
    assert torch.equal(rotated[:, 12:], qkv[:, 12:])


def test_bad_inputs_are_typed_errors_naming_the_argument(ops):
    with pytest.raises(RuntimeError, match="input must be float32"):
        ops.rms_norm(torch.empty(2, 4, dtype=torch.float64), torch.ones(2, 4, dtype=torch.float64),
                     torch.ones(4, dtype=torch.float64), 1e-6)  # fmt: skip
    with pytest.raises(RuntimeError, match="weight has 5 elements, rows have 4"):
        ops.rms_norm(torch.empty(2, 4), torch.ones(2, 4), torch.ones(5), 1e-6)
    with pytest.raises(RuntimeError, match="head_dim must be even"):
        ops.rotary_embedding(torch.ones(2, 1, 5), torch.ones(2, 2), torch.ones(2, 2))
    with pytest.raises(RuntimeError, match="cos and sin must be"):
        ops.rotary_embedding(torch.ones(2, 1, 8), torch.ones(3, 4), torch.ones(3, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_layer_uses_the_op_for_float32_rows_and_torch_otherwise(ops, dtype):
    torch.manual_seed(3)
    plain, fused = RMSNorm(48, 1e-6), RMSNorm(48, 1e-6)
    with torch.no_grad():
        plain.weight.copy_(torch.randn(48))
        fused.weight.copy_(plain.weight)
    plain.to(dtype)
    fused.to(dtype)
    fused.use_kernel_config(KernelConfig(use_cpu_ops=True))
    hidden, residual = torch.randn(6, 48, dtype=dtype), torch.randn(6, 48, dtype=dtype)
    want_normed, want_sum = plain(hidden.clone(), residual.clone())
    got_normed, got_sum = fused(hidden.clone(), residual.clone())
    assert torch.equal(got_sum, want_sum)
    torch.testing.assert_close(got_normed, want_normed, rtol=1e-6, atol=1e-6)
    heads = torch.randn(6, 4, 48, dtype=dtype)  # 3-D (q/k norm): always the torch ops
    torch.testing.assert_close(fused(heads), plain(heads), rtol=0, atol=0)


def test_rms_norm_layer_keeps_torch_ops_for_a_residual_it_cannot_take(ops):
    """float32 rows with a column-strided residual: the torch path, inputs left unchanged."""
    norm = RMSNorm(8, 1e-6)
    norm.use_kernel_config(KernelConfig(use_cpu_ops=True))
    hidden, residual = torch.randn(4, 8), torch.randn(8, 4).t()  # residual.stride(-1) == 4
    before = (hidden.clone(), residual.clone())
    normed, summed = norm(hidden, residual)
    assert torch.equal(hidden, before[0]) and torch.equal(residual, before[1])
    assert torch.equal(summed, hidden + residual)
    assert torch.equal(normed, F.rms_norm(hidden + residual, (8,), norm.weight, 1e-6))
