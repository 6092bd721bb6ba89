"""llmd's C++ weight-only int8/int4 ops against torch (dequantize, then F.linear), in float32
and bfloat16, at decode-sized row counts, on shapes that are no multiple of the vectors'
width, plus the layers' choice between the kernels, the dense prefill path and aten."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from llmd.layers.kernel_config import KernelConfig
from llmd.quantization.grouped_weight import GroupedIntWeight
from llmd.quantization.int4_linear import Int4Linear, int4_reference, pack_int4, unpack_int4
from llmd.quantization.int8_linear import CPU_KERNEL_MAX_ROWS, Int8Linear, int8_reference
from tests.cpu_op_calls import llmd_ops_run
from tests.quantization.test_int_kernels import random_weight

ROW_COUNTS = (1, 2, 3, 8, 17, 32)
"""Activation rows: the int8 kernel streams weight rows at 1-2 and tiles them from 3."""
RELATIVE_TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
"""Largest |op - reference| / max |reference|: float32 differs only in summation order;
bfloat16 rounds the output once (half an ulp is 2^-9 of a value)."""
CPU_OPS = KernelConfig(use_cpu_ops=True)


def grouped_weight(
    out_features: int, in_features: int, num_bits: int, group_size: int,
    has_zero_points: bool = False, seed: int = 0,
) -> GroupedIntWeight:  # fmt: skip
    """Random codes with a scale (and zero point) per group; the last group may be partial."""
    generator = torch.Generator().manual_seed(seed)
    half = 1 << (num_bits - 1)
    num_groups = -(-in_features // group_size)
    values = torch.randint(-half, half, (out_features, in_features), generator=generator)
    zero_points = None
    if has_zero_points:
        zero_points = torch.randint(-half, half, (out_features, num_groups), generator=generator)
    return GroupedIntWeight(
        values=values.to(torch.int8),
        scales=torch.rand(out_features, num_groups, generator=generator) * 0.02 + 0.005,
        zero_points=None if zero_points is None else zero_points.to(torch.int16),
        group_size=group_size,
        num_bits=num_bits,
    )


def rows(num_rows: int, in_features: int, dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(num_rows)
    return torch.randn(num_rows, in_features, generator=generator).to(dtype)


def assert_close(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    assert got.dtype == dtype and got.shape == expected.shape
    assert torch.isfinite(got).all()
    error = ((got.float() - expected).abs().max() / expected.abs().max()).item()
    assert error < RELATIVE_TOLERANCE[dtype], error


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_rows", ROW_COUNTS)
@pytest.mark.parametrize("out_features, in_features", [(37, 101), (64, 576), (5, 16)])
def test_int8_linear_op_matches_reference(cpu_ops, dtype, num_rows, out_features, in_features):
    weight = grouped_weight(out_features, in_features, 8, in_features)
    bias = torch.randn(out_features) if out_features != 5 else None
    hidden = rows(num_rows, in_features, dtype)
    out = torch.full((num_rows, out_features), float("nan"), dtype=dtype)
    scales = weight.scales.reshape(-1).contiguous()
    cpu_ops.int8_linear(
        out, hidden, weight.values, scales, None if bias is None else bias.to(dtype)
    )
    bias_ref = None if bias is None else bias.to(dtype).float()
    expected = F.linear(hidden.float(), weight.dequantize(), bias_ref)
    assert_close(out, expected, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_rows", ROW_COUNTS)
@pytest.mark.parametrize(
    "out_features, in_features, group_size, has_zero_points",
    [
        (37, 101, 32, True),  # 37 rows: one partial block; 101 columns: a partial group
        (64, 576, 64, False),
        (96, 128, 128, True),  # one group per row
        (16, 7, 3, False),
    ],
)
def test_int4_linear_op_matches_reference(
    cpu_ops, dtype, num_rows, out_features, in_features, group_size, has_zero_points
):
    weight = grouped_weight(out_features, in_features, 4, group_size, has_zero_points)
    bias = torch.randn(out_features)
    layer = Int4Linear(weight, bias, dtype)  # llmd's packing and [G, N_pad] scales
    hidden = rows(num_rows, in_features, dtype)
    out = torch.full((num_rows, out_features), float("nan"), dtype=dtype)
    cpu_ops.int4_linear(
        out, hidden, layer.packed_weight, layer.scales, layer.zero_points, group_size, layer.bias
    )
    assert_close(out, F.linear(hidden.float(), weight.dequantize(), layer.bias.float()), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dequantize_ops_give_the_reference_weight(cpu_ops, dtype):
    int8 = grouped_weight(37, 101, 8, 101)
    dense = torch.empty(37, 101, dtype=dtype)
    cpu_ops.int8_dequantize(dense, int8.values, int8.scales.reshape(-1).contiguous())
    assert torch.equal(dense, int8.dequantize().to(dtype))
    int4 = grouped_weight(37, 101, 4, 32, has_zero_points=True)
    layer = Int4Linear(int4, None, dtype)
    dense_t = torch.empty(101, 64, dtype=dtype)  # [K, N padded to 32s]
    cpu_ops.int4_dequantize(dense_t, layer.packed_weight, layer.scales, layer.zero_points, 32)
    assert torch.equal(dense_t[:, :37], int4.dequantize().t().to(dtype))
    assert torch.equal(dense_t[:, 37:], torch.zeros(101, 27, dtype=dtype))  # padded rows


def test_ops_refuse_mismatched_operands_by_name(cpu_ops):
    weight = grouped_weight(16, 64, 8, 64)
    scales = weight.scales.reshape(-1).contiguous()
    out = torch.empty(2, 16)
    with pytest.raises(RuntimeError, match="in_features 64"):
        cpu_ops.int8_linear(out, torch.randn(2, 63), weight.values, scales, None)
    with pytest.raises(RuntimeError, match="scales must be"):
        cpu_ops.int8_linear(out, torch.randn(2, 64), weight.values, scales.double(), None)
    with pytest.raises(RuntimeError, match="out must be"):
        cpu_ops.int8_linear(torch.empty(2, 16, dtype=torch.bfloat16), torch.randn(2, 64),
                        weight.values, scales, None)  # fmt: skip
    layer = Int4Linear(grouped_weight(16, 64, 4, 32), None, torch.float32)
    with pytest.raises(RuntimeError, match="scales must be"):
        cpu_ops.int4_linear(out, torch.randn(2, 64), layer.packed_weight, layer.scales, None, 16,
                        None)  # fmt: skip
    with pytest.raises(RuntimeError, match="out's width"):
        cpu_ops.int4_linear(torch.empty(2, 40), torch.randn(2, 64), layer.packed_weight,
                        layer.scales, None, 32, None)  # fmt: skip


def test_int4_packing_round_trips_and_places_rows_by_block():
    values = torch.randint(-8, 8, (40, 9), dtype=torch.int8)
    packed = pack_int4(values)
    assert packed.shape == (2, 9, 16) and packed.dtype == torch.uint8
    assert torch.equal(unpack_int4(packed, 40), values.to(torch.int16))
    assert packed[0, 3, 5].item() == (values[5, 3] + 8) | ((values[21, 3] + 8) << 4)
    assert packed[1, 0, 7].item() == (values[39, 0] + 8) | (8 << 4)  # padded row: code 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_rows", [1, CPU_KERNEL_MAX_ROWS, CPU_KERNEL_MAX_ROWS + 1, 70])
def test_layers_dispatch_to_kernels_or_dense_path(cpu_ops, dtype, num_rows):
    int8 = grouped_weight(48, 96, 8, 96)
    int4 = grouped_weight(40, 128, 4, 64, has_zero_points=True)
    bias = torch.randn(48)
    int8_layer, int4_layer = Int8Linear(int8, bias, dtype), Int4Linear(int4, bias[:40], dtype)
    for layer in (int8_layer, int4_layer):
        layer.use_kernel_config(CPU_OPS)
        assert layer.cpu_ops is not None
    hidden = rows(num_rows, 96, dtype).reshape(1, num_rows, 96)
    assert_close(int8_layer(hidden), int8_reference(hidden, int8, bias), dtype)
    hidden = rows(num_rows, 128, dtype)
    assert_close(int4_layer(hidden), int4_reference(hidden, int4, bias[:40]), dtype)
    assert int4_layer.aten_packed_weight is None  # torch's packing is never made under the C++ ops


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_rows_with_gaps_run_in_place_on_the_bound_kernel(cpu_ops, dtype):
    """Decode rows (2-D, rows strided by a gap of NaN) go straight to the bound kernel, which
    must read each row in place and never the gap; other shapes take the general path."""
    int8 = grouped_weight(48, 96, 8, 96)
    int4 = grouped_weight(40, 128, 4, 64, has_zero_points=True)
    layers = [(Int8Linear(int8, None, dtype), int8_reference, int8, "int8_linear")]
    layers.append((Int4Linear(int4, None, dtype), int4_reference, int4, "int4_linear"))
    for layer, reference, weight, op_name in layers:
        layer.use_kernel_config(CPU_OPS)
        in_features = weight.shape[1]
        wide = torch.full((3, in_features + 8), float("nan"), dtype=dtype)
        wide[:, :in_features] = rows(3, in_features, dtype)
        hidden = wide[:, :in_features]  # [3, K], row stride K + 8
        assert layer.decode_kernel is not None and layer.decode_kernel.takes(hidden)
        called, out = llmd_ops_run(lambda: layer(hidden))  # noqa: B023 (run at once)
        assert called == [op_name]
        assert_close(out, reference(hidden, weight, None), dtype)
        batched = hidden.reshape(1, 3, in_features)  # 3-D: the general path, same answer
        assert not layer.decode_kernel.takes(batched)
        assert torch.equal(layer(batched), out.reshape(1, 3, -1))
        assert not layer.decode_kernel.takes(rows(CPU_KERNEL_MAX_ROWS + 1, in_features, dtype))
        assert not layer.decode_kernel.takes(hidden.to(torch.float16))


@pytest.mark.parametrize("num_rows", [1, 5, CPU_KERNEL_MAX_ROWS + 3])
def test_act_order_runs_on_the_cpu_ops(cpu_ops, num_rows):
    weight = random_weight(40, 128, 4, 32, has_zero_points=True, is_act_order=True)
    layer = Int4Linear(weight, None, torch.float32)
    assert layer.column_order is not None
    layer.use_kernel_config(CPU_OPS)
    hidden = rows(num_rows, 128, torch.float32)
    assert_close(layer(hidden), int4_reference(hidden, weight, None), torch.float32)


def test_layers_keep_aten_without_the_cpu_ops():
    weight = grouped_weight(40, 128, 4, 64, has_zero_points=True)
    layer = Int4Linear(weight, None, torch.float32)
    layer.use_kernel_config(KernelConfig())
    assert layer.cpu_ops is None
    hidden = rows(3, 128, torch.float32)
    assert layer.aten_packed_weight is not None and layer.packed_weight is None  # one packing
    assert_close(layer(hidden), int4_reference(hidden, weight, None), torch.float32)
    with pytest.raises(RuntimeError, match="only torch's packing"):
        layer.use_kernel_config(CPU_OPS)
    half_layer = Int4Linear(weight, None, torch.float16)
    half_layer.use_kernel_config(CPU_OPS)
    assert half_layer.cpu_ops is None  # float16 is no dtype of the C++ ops: aten runs it
