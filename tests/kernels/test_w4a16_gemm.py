"""The W4A16 GEMM against dequantize-then-matmul, over row counts, groups, zero points and
dtypes, and its packing against GPTQ's (the same layout, written independently)."""

from __future__ import annotations

import pytest
import torch

from llmd.errors import InvalidParameterError
from llmd.kernels import launch_configs
from llmd.kernels.w4a16_gemm import (
    DECODE_ROWS,
    MAX_NUM_SPLITS,
    choose_num_splits,
    k_tile,
    pack_int4_along_k,
    w4a16_config,
    w4a16_gemm,
    w4a16_reference,
)
from tests.quantized_checkpoints import pack_words

RELATIVE_TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float32: 1e-5}
"""Largest |kernel - reference| / max |reference|: the kernel rounds the dequantized weight
to the activations' dtype before the dot (the reference keeps it in fp32), and the
interpreter truncates bf16 instead of rounding."""
SHAPES = {
    "g32-sym": (40, 128, 32, False),  # N not a multiple of the tile
    "g128-zeros": (64, 256, 128, True),
    "g32-zeros-partial-k": (48, 96, 32, True),  # K not a multiple of the K tile
    "per-channel": (72, 200, 256, False),  # one group: K rounded up to the launch group
}


def random_operands(num_cols, depth, group_size, has_zeros, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    num_groups = -(-depth // group_size)
    codes = torch.randint(0, 16, (num_cols, depth), generator=generator)
    scales = torch.rand(num_groups, num_cols, generator=generator) * 0.02 + 0.005
    zeros = None
    if has_zeros:
        zeros = torch.randint(0, 16, (num_groups, num_cols), generator=generator).float()
    bias = torch.randn(num_cols, generator=generator).to(dtype)
    return codes, scales, zeros, bias


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return ((got.float() - expected.float()).abs().max() / expected.float().abs().max()).item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("num_rows", [1, 5, 16, 33])
def test_matches_dequantize_then_matmul(device, dtype, shape, num_rows):
    num_cols, depth, group_size, has_zeros = SHAPES[shape]
    codes, scales, zeros, bias = random_operands(num_cols, depth, group_size, has_zeros, dtype)
    x = torch.randn(num_rows, depth, generator=torch.Generator().manual_seed(1)).to(dtype)
    packed = pack_int4_along_k(codes)
    on = [t if t is None else t.to(device) for t in (x, packed, scales, zeros, bias)]
    got = w4a16_gemm(on[0], on[1], on[2], on[3], group_size, on[4]).cpu()
    expected = w4a16_reference(x, packed, scales, zeros, group_size, bias)
    assert got.dtype == dtype and got.shape == (num_rows, num_cols)
    assert relative_error(got, expected) < RELATIVE_TOLERANCE[dtype]
    # The reference itself against an independent dequantization of the codes.
    columns = torch.arange(depth) // group_size
    zero = zeros[columns].t() if zeros is not None else 8.0
    weight = (codes.float() - zero) * scales[columns].t()  # [N, K]
    independent = x.float() @ weight.t() + bias.float()
    assert relative_error(expected, independent) < RELATIVE_TOLERANCE[dtype]


@pytest.mark.parametrize("num_splits", [2, 3, 16])
@pytest.mark.parametrize("shape", ["g32-zeros-partial-k", "g128-zeros"])
def test_split_k_sums_to_the_same_product(device, num_splits, shape):
    num_cols, depth, group_size, has_zeros = SHAPES[shape]
    codes, scales, zeros, bias = random_operands(num_cols, depth, group_size, has_zeros,
                                                 torch.float16)  # fmt: skip
    x = torch.randn(1, depth, generator=torch.Generator().manual_seed(7)).half()
    packed = pack_int4_along_k(codes)
    got = w4a16_gemm(x.to(device), packed.to(device), scales.to(device), zeros.to(device),
                     group_size, bias.to(device), num_splits=num_splits).cpu()  # fmt: skip
    unsplit = w4a16_gemm(x.to(device), packed.to(device), scales.to(device), zeros.to(device),
                         group_size, bias.to(device), num_splits=1).cpu()  # fmt: skip
    expected = w4a16_reference(x, packed, scales, zeros, group_size, bias)
    assert relative_error(got, expected) < RELATIVE_TOLERANCE[torch.float16]
    assert relative_error(got, unsplit) < RELATIVE_TOLERANCE[torch.float16]


def test_k_is_split_only_when_the_output_tiles_leave_sms_idle():
    assert choose_num_splits(num_programs=64, num_k_tiles=32, num_sms=132) == 5  # 264 / 64
    assert choose_num_splits(num_programs=448, num_k_tiles=32, num_sms=132) == 1
    assert choose_num_splits(num_programs=1, num_k_tiles=32, num_sms=132) == 8  # 4 tiles each
    assert choose_num_splits(num_programs=1, num_k_tiles=1024, num_sms=132) == MAX_NUM_SPLITS
    assert choose_num_splits(num_programs=4, num_k_tiles=3, num_sms=132) == 1  # K too short
    assert choose_num_splits(num_programs=4, num_k_tiles=64, num_sms=1) == 1  # interpreter


def test_fp32_rows_keep_fp32_accuracy(device):
    codes, scales, zeros, bias = random_operands(40, 128, 32, True, torch.float32)
    x = torch.randn(3, 128, generator=torch.Generator().manual_seed(2))
    packed = pack_int4_along_k(codes)
    got = w4a16_gemm(x.to(device), packed.to(device), scales.to(device), zeros.to(device), 32,
                     bias.to(device)).cpu()  # fmt: skip
    expected = w4a16_reference(x, packed, scales, zeros, 32, bias)
    assert relative_error(got, expected) < RELATIVE_TOLERANCE[torch.float32]


def test_a_row_strided_view_is_read_in_place(device):
    codes, scales, _, _ = random_operands(32, 64, 32, False, torch.float16)
    wide = torch.randn(4, 96, generator=torch.Generator().manual_seed(3)).half()
    x = wide[:, 16:80]  # row stride 96
    packed = pack_int4_along_k(codes)
    got = w4a16_gemm(x.to(device), packed.to(device), scales.to(device), None, 32).cpu()
    expected = w4a16_reference(x, packed, scales, None, 32)
    assert relative_error(got, expected) < RELATIVE_TOLERANCE[torch.float16]


def test_the_packing_is_gptqs_qweight():
    codes = torch.randint(0, 16, (24, 64), generator=torch.Generator().manual_seed(4))
    assert torch.equal(pack_int4_along_k(codes), pack_words(codes, 4).t())  # [K / 8, N]
    padded = pack_int4_along_k(codes[:, :60])  # K = 60: the last word's top nibbles are 0
    assert padded.shape == (8, 24)
    assert torch.equal(padded[:7], pack_words(codes, 4).t()[:7])
    assert torch.equal((padded[7] >> 16) & 0xFFFF, torch.zeros(24, dtype=torch.int32))


def test_decode_batches_get_16_row_tiles_on_every_arch():
    for arch in (*launch_configs.SUPPORTED_ARCHS, launch_configs.INTERPRETER_ARCH):
        for dtype in (torch.float16, torch.bfloat16):
            assert w4a16_config(arch, 1, dtype).block_m == 16
            assert w4a16_config(arch, DECODE_ROWS, dtype).block_m == 16
            prefill = w4a16_config(arch, DECODE_ROWS + 1, dtype)
            assert prefill.block_m >= 16 and k_tile(prefill.block_k, 128) >= 16


def test_the_k_tile_divides_the_group():
    assert k_tile(128, 128) == 128
    assert k_tile(128, 32) == 32
    assert k_tile(128, 64) == 64
    assert k_tile(64, 96) == 32
    assert k_tile(128, 8) == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"packed": torch.zeros(7, 16, dtype=torch.int32)}, "packed"),
        ({"packed": torch.zeros(8, 16, dtype=torch.int64)}, "packed"),
        ({"scales": torch.zeros(1, 16)}, "scales"),
        ({"scales": torch.zeros(2, 16, dtype=torch.float16)}, "scales"),
        ({"zeros": torch.zeros(2, 15)}, "zeros"),
        ({"bias": torch.zeros(16)}, "bias"),  # float32 bias for float16 rows
        ({"group_size": 8, "scales": torch.zeros(8, 16)}, "group_size"),
        ({"x": torch.zeros(3, 64, dtype=torch.int32)}, "x"),
        ({"num_splits": 0}, "num_splits"),
    ],
)
def test_rejects_bad_inputs(change, field, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    args = {
        "x": torch.zeros(3, 64, dtype=torch.float16),
        "packed": torch.zeros(8, 16, dtype=torch.int32),
        "scales": torch.zeros(2, 16),
        "zeros": None,
        "group_size": 32,
        "bias": None,
        "num_splits": None,
    } | change
    with pytest.raises(InvalidParameterError) as error:
        w4a16_gemm(**args)
    assert error.value.parameter == field
