"""The C++ CPU layer ops (llmd/layers/csrc): RMSNorm, fused add + RMSNorm, in-place rotary and
SiLU-and-mul against the torch ops they replace, in float32 and bfloat16, on the parallel and
single-thread paths, strided views, odd widths and bad input; and the layers that pick them.

bf16 tolerances: rotary and the residual sum match torch bit for bit (same roundings); the
norm sums squares in another order than torch's mean, so a rare element differs by a bf16
ulp before the weight's product (rtol 2^-6, under 1% of elements); SiLU's exp is a
polynomial within a float32 ulp or two of torch's SLEEF exp, which can flip a bf16
rounding (rtol 2^-7; float32 rtol 1e-6).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from llmd.attention.cpu_extension import CPU_OP_DTYPES, load_cpu_ops
from llmd.layers.activation import GatedActivation
from llmd.layers.attention import PagedSelfAttention
from llmd.layers.kernel_config import KernelConfig
from llmd.layers.norm import RMSNorm
from llmd.layers.rotary import apply_rotary
from tests.cpu_op_calls import llmd_ops_run

BF16 = torch.bfloat16
BF16_NORM_TOLERANCE = {"rtol": 2**-6, "atol": 0.0}
"""The rare element whose fp32 scale rounds to the other bf16 neighbour: up to 2^-7 relative
before the weight's product, plus that product's rounding (2^-8)."""


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
    with pytest.raises(RuntimeError, match="input must be float32 or bfloat16"):
        ops.rms_norm(torch.empty(2, 4, dtype=torch.float64), torch.ones(2, 4, dtype=torch.float64),
                     torch.ones(4, dtype=torch.float64), 1e-6)  # fmt: skip
    with pytest.raises(RuntimeError, match="weight has 5 elements, rows have 4"):
        ops.rms_norm(torch.empty(2, 4), torch.ones(2, 4), torch.ones(5), 1e-6)
    with pytest.raises(RuntimeError, match="head_dim must be even"):
        ops.rotary_embedding(torch.ones(2, 1, 5), torch.ones(2, 2), torch.ones(2, 2))
    with pytest.raises(RuntimeError, match="cos and sin must be"):
        ops.rotary_embedding(torch.ones(2, 1, 8), torch.ones(3, 4), torch.ones(3, 4))
    with pytest.raises(RuntimeError, match=r"weight must be float32 or bfloat16 .*got Float"):
        ops.rms_norm(torch.empty(2, 4, dtype=BF16), torch.ones(2, 4, dtype=BF16), torch.ones(4),
                     1e-6)  # fmt: skip
    with pytest.raises(RuntimeError, match=r"cos must be .*got Float"):
        ops.rotary_embedding(torch.ones(2, 1, 8, dtype=BF16), torch.ones(2, 4), torch.ones(2, 4))
    with pytest.raises(RuntimeError, match=r"out must be \[rows, I\]"):
        ops.silu_and_mul(torch.empty(2, 3), torch.ones(2, 8))


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
def test_rms_norm_layer_uses_the_op_for_float32_and_bf16_rows_and_torch_otherwise(ops, dtype):
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
    called, (got_normed, got_sum) = llmd_ops_run(lambda: fused(hidden.clone(), residual.clone()))
    assert called == ["fused_add_rms_norm"]
    assert torch.equal(got_sum, want_sum)
    tolerance = BF16_NORM_TOLERANCE if dtype == BF16 else {"rtol": 1e-6, "atol": 1e-6}
    torch.testing.assert_close(got_normed, want_normed, **tolerance)
    called, normed = llmd_ops_run(lambda: fused(hidden))
    assert called == ["rms_norm"]
    torch.testing.assert_close(normed, plain(hidden), **tolerance)
    heads = torch.randn(6, 4, 48, dtype=dtype)  # 3-D (q/k norm): always the torch ops
    called, normed = llmd_ops_run(lambda: fused(heads))
    assert called == []
    torch.testing.assert_close(normed, plain(heads), rtol=0, atol=0)


def test_rms_norm_layer_keeps_torch_ops_for_bf16_rows_with_a_float32_weight(ops):
    """A mixed pair promotes to float32 in torch; the op (one dtype) must not take it."""
    norm = RMSNorm(8, 1e-6)  # float32 weight
    norm.use_kernel_config(KernelConfig(use_cpu_ops=True))
    called, normed = llmd_ops_run(lambda: norm(torch.randn(3, 8, dtype=BF16)))
    assert called == [] and normed.dtype == torch.float32


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


def _bf16_norm_reference(hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm's low-precision torch path: normalize in fp32, round, scale by the weight."""
    norm = RMSNorm(hidden.shape[-1], eps).to(BF16)
    with torch.no_grad():
        norm.weight.copy_(weight)
    return norm(hidden)


@pytest.mark.parametrize(("num_rows", "hidden_size"), SHAPES)
def test_bf16_rms_norm_matches_torch_low_precision_path(ops, num_rows, hidden_size):
    torch.manual_seed(num_rows)
    # Rows 8 elements apart, with NaN in the gaps the op must never read.
    wide = torch.full((num_rows, hidden_size + 8), float("nan"), dtype=BF16)
    wide[:, :hidden_size] = torch.randn(num_rows, hidden_size) * 3
    hidden, weight = wide[:, :hidden_size], torch.randn(hidden_size).to(BF16)
    out = torch.full((num_rows, hidden_size), float("nan"), dtype=BF16)
    ops.rms_norm(out, hidden, weight, 1e-6)
    expected = _bf16_norm_reference(hidden, weight, 1e-6)
    torch.testing.assert_close(out, expected, **BF16_NORM_TOLERANCE)
    assert (out != expected).float().mean() < 0.01  # the order of the sum, not the rounding


@pytest.mark.parametrize(("num_rows", "hidden_size"), SHAPES)
def test_bf16_fused_add_rms_norm_rounds_the_sum_first(ops, num_rows, hidden_size):
    torch.manual_seed(num_rows + 1)
    hidden = torch.randn(num_rows, hidden_size).to(BF16)
    wide_residual = torch.full((num_rows, hidden_size + 3), float("nan"), dtype=BF16)
    wide_residual[:, 3:] = torch.randn(num_rows, hidden_size)
    residual = wide_residual[:, 3:]  # strided rows, NaN in the 3 columns before each
    weight = torch.randn(hidden_size).to(BF16)
    expected_sum = hidden + residual  # rounded to bf16, as in HF
    expected = _bf16_norm_reference(expected_sum, weight, 1e-5)
    ops.fused_add_rms_norm(hidden, residual, weight, 1e-5)
    assert torch.equal(residual, expected_sum)
    torch.testing.assert_close(hidden, expected, **BF16_NORM_TOLERANCE)
    assert wide_residual[:, :3].isnan().all()


@pytest.mark.parametrize("num_tokens", [1, 5, 200])
def test_bf16_rotary_equals_apply_rotary_bit_for_bit(ops, num_tokens):
    """bf16 q/k with bf16 cos/sin (RotaryEmbedding.cos_sin in the model's dtype)."""
    torch.manual_seed(num_tokens)
    qkv = torch.randn(num_tokens, 9 + 3 + 3, 64).to(BF16)
    qkv[:, 12:] = float("nan")  # v heads: never read or written
    angles = torch.rand(num_tokens, 32) * 6
    cos, sin = angles.cos().to(BF16), angles.sin().to(BF16)
    expected = apply_rotary(qkv[:, :12], cos.unsqueeze(1), sin.unsqueeze(1))
    rotated = qkv.clone()
    ops.rotary_embedding(rotated[:, :12], cos, sin)
    assert torch.equal(rotated[:, :12], expected)
    assert rotated[:, 12:].isnan().all()


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
@pytest.mark.parametrize(("num_rows", "width"), [(1, 35), (32, 1536), (80, 1536)])
def test_silu_and_mul_matches_torch(ops, dtype, num_rows, width):
    torch.manual_seed(num_rows)
    # Rows 2 * width + 5 apart, NaN in the gaps; extremes where exp under/overflows.
    wide = torch.full((num_rows, 2 * width + 5), float("nan"))
    wide[:, : 2 * width] = torch.randn(num_rows, 2 * width) * 4
    wide[0, :6] = torch.tensor([100.0, -100.0, -87.5, -120.0, 0.0, 1e-3])
    gate_up = wide.to(dtype)[:, : 2 * width]
    gate, up = gate_up.chunk(2, dim=-1)
    out = torch.full((num_rows, width), float("nan"), dtype=dtype)
    ops.silu_and_mul(out, gate_up)
    tolerance = {"rtol": 2**-7, "atol": 0.0} if dtype == BF16 else {"rtol": 1e-6, "atol": 1e-30}
    torch.testing.assert_close(out, F.silu(gate) * up, **tolerance)
    assert not out.isnan().any()


class _RecordingBackend:
    """Keeps copies of the rotated query and key heads and returns the query unattended."""

    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def forward(self, inputs) -> torch.Tensor:
        self.seen += [inputs.query.clone(), inputs.key.clone()]
        return inputs.query


@pytest.mark.parametrize("qk_norm", [False, True])
def test_bf16_attention_rotates_with_the_op_and_matches_torch(ops, qk_norm):
    torch.manual_seed(5)
    eps = 1e-6 if qk_norm else None
    backends = [_RecordingBackend(), _RecordingBackend()]
    layers = [PagedSelfAttention(64, 4, 2, 16, b, qk_norm_eps=eps).to(BF16) for b in backends]
    layers[1].load_state_dict(layers[0].state_dict())
    layers[1].use_kernel_config(KernelConfig(use_cpu_ops=True))
    hidden = torch.randn(7, 64).to(BF16)
    angles = torch.rand(7, 1, 8) * 6
    cos, sin = angles.cos().to(BF16), angles.sin().to(BF16)
    with torch.inference_mode():
        layers[0](hidden, cos, sin, (None, None), None)
        called, _ = llmd_ops_run(lambda: layers[1](hidden, cos, sin, (None, None), None))
    for got, want in zip(backends[1].seen, backends[0].seen, strict=True):
        assert torch.equal(got, want)
    assert called == ["rotary_embedding"] * (2 if qk_norm else 1)


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
def test_silu_layer_uses_the_op_in_the_dtypes_where_it_is_faster(ops, dtype):
    torch.manual_seed(2)
    layer, gelu = GatedActivation("silu"), GatedActivation("gelu")
    for module in (layer, gelu):
        module.use_kernel_config(KernelConfig(use_cpu_ops=True))
    assert layer._cpu_silu_and_mul is not None and gelu._cpu_silu_and_mul is None
    calls = []
    layer._cpu_silu_and_mul = lambda out, gate_up: calls.append(ops.silu_and_mul(out, gate_up))
    gate_up = torch.randn(4, 64).to(dtype)
    gate, up = gate_up.chunk(2, dim=-1)
    tolerance = {"rtol": 2**-7, "atol": 0.0} if dtype == BF16 else {"rtol": 1e-6, "atol": 1e-30}
    torch.testing.assert_close(layer(gate_up), F.silu(gate) * up, **tolerance)
    assert len(calls) == (1 if dtype in CPU_OP_DTYPES else 0)
    layer(torch.randn(4, 2, 64).to(dtype))  # 3-D: the torch ops
    assert len(calls) == (1 if dtype in CPU_OP_DTYPES else 0)
