"""The CPU int8 and int4 weight-only layers against their torch references (dequantize, then
F.linear), in float32 and bfloat16, including padded rows, act-order and asymmetric zeros."""

from __future__ import annotations

import pytest
import torch

from llmd.quantization.grouped_weight import GroupedIntWeight, concat_rows
from llmd.quantization.int4_linear import (
    Int4Linear,
    can_run_int4,
    int4_reference,
    kernel_group_size,
)
from llmd.quantization.int8_linear import Int8Linear, can_run_int8, int8_reference

CPU = torch.device("cpu")
RELATIVE_TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}
"""Largest |kernel - reference| / max |reference| allowed: float32 accumulates like the
reference; bfloat16 rounds activations, scales and outputs to 8 mantissa bits."""


def random_weight(
    out_features: int, in_features: int, num_bits: int, group_size: int, seed: int = 0,
    has_zero_points: bool = False, is_act_order: bool = False,
) -> GroupedIntWeight:  # fmt: skip
    generator = torch.Generator().manual_seed(seed)
    low, high = -(1 << (num_bits - 1)), (1 << (num_bits - 1)) - 1
    num_groups = in_features // group_size
    values = torch.randint(low, high + 1, (out_features, in_features), generator=generator)
    zero_points = None
    if has_zero_points:
        zero_points = torch.randint(low, high + 1, (out_features, num_groups), generator=generator)
        zero_points = zero_points.to(torch.int16)
    group_ids = None
    if is_act_order:
        rank = torch.argsort(torch.randperm(in_features, generator=generator))
        group_ids = rank // group_size
    return GroupedIntWeight(
        values=values.to(torch.int8),
        scales=torch.rand(out_features, num_groups, generator=generator) * 0.02 + 0.005,
        zero_points=zero_points,
        group_size=group_size,
        num_bits=num_bits,
        group_ids=group_ids,
    )


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return ((got.float() - expected).abs().max() / expected.abs().max()).item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_rows", [1, 7, 33])
def test_int8_linear_matches_its_reference(dtype, num_rows):
    weight = random_weight(48, 96, 8, 96)
    bias = torch.randn(48)
    assert can_run_int8(weight, CPU)
    layer = Int8Linear(weight, bias, dtype)
    hidden = torch.randn(num_rows, 96, generator=torch.Generator().manual_seed(1)).to(dtype)
    got = layer(hidden)
    assert got.dtype == dtype and got.shape == (num_rows, 48)
    assert relative_error(got, int8_reference(hidden, weight, bias)) < RELATIVE_TOLERANCE[dtype]


def test_int8_kernel_refuses_groups_and_zero_points():
    assert not can_run_int8(random_weight(16, 64, 8, 32), CPU)  # two scales per row
    assert not can_run_int8(random_weight(16, 64, 8, 64, has_zero_points=True), CPU)
    assert not can_run_int8(random_weight(16, 64, 4, 64), CPU)
    assert not can_run_int8(random_weight(16, 64, 8, 64), torch.device("cuda"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "out_features, in_features, group_size, has_zero_points, is_act_order",
    [
        (48, 128, 32, False, False),
        (40, 128, 64, True, False),  # 40 rows: padded to 48 for the kernel
        (32, 256, 128, True, True),
        (64, 512, 512, False, False),  # one group per row: run as groups of 256
        (16, 96, 32, True, True),
    ],
)
def test_int4_linear_matches_its_reference(
    dtype, out_features, in_features, group_size, has_zero_points, is_act_order
):
    weight = random_weight(
        out_features, in_features, 4, group_size, has_zero_points=has_zero_points,
        is_act_order=is_act_order,
    )  # fmt: skip
    bias = torch.randn(out_features)
    assert can_run_int4(weight, CPU)
    layer = Int4Linear(weight, bias, dtype)
    assert (layer.column_order is not None) == is_act_order
    hidden = torch.randn(5, in_features, generator=torch.Generator().manual_seed(2)).to(dtype)
    got = layer(hidden)
    assert got.dtype == dtype and got.shape == (5, out_features)
    assert relative_error(got, int4_reference(hidden, weight, bias)) < RELATIVE_TOLERANCE[dtype]
    three_d = layer(hidden.reshape(1, 5, in_features))
    assert torch.equal(three_d.reshape(5, out_features), got)


def test_int4_kernel_refuses_groups_it_cannot_tile():
    assert not can_run_int4(random_weight(16, 64, 4, 16), CPU)  # groups of 16 < 32
    assert not can_run_int4(random_weight(16, 96, 4, 48), CPU)  # 48 is no multiple of 32
    assert kernel_group_size(random_weight(16, 96, 4, 96)) == 32  # one group: 3 x 32
    assert kernel_group_size(random_weight(16, 512, 4, 128)) == 128
    assert not can_run_int4(random_weight(16, 64, 8, 64), CPU)
    assert not can_run_int4(random_weight(16, 64, 4, 32), torch.device("cuda"))


def test_concat_rows_stacks_shards_or_refuses_mismatched_ones():
    first, second = random_weight(16, 64, 4, 32, seed=1), random_weight(8, 64, 4, 32, seed=2)
    stacked = concat_rows([first, second])
    assert stacked is not None and stacked.shape == (24, 64)
    expected = torch.cat([first.dequantize(), second.dequantize()])
    assert torch.equal(stacked.dequantize(), expected)
    assert concat_rows([first, random_weight(8, 64, 4, 64)]) is None  # other group size
    act_order = random_weight(8, 64, 4, 32, is_act_order=True)
    assert concat_rows([first, act_order]) is None
