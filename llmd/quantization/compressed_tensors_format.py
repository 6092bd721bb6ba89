"""Reads one linear's tensors in compressed-tensors' on-disk formats (llm-compressor's output).

- `pack-quantized`: int4/int8 codes plus 2^(bits-1), packed 32/bits to an int32 along the
  row (`weight_packed` [N, ceil(K * bits / 32)]), `weight_shape` [2], `weight_scale`
  ([N, 1] or [N, G]), and for asymmetric schemes `weight_zero_point` packed the same way
  along the output dim ([ceil(N * bits / 32), G]).
- `int-quantized` / `naive-quantized`: `weight` as int8 codes, `weight_scale`, and
  `weight_zero_point` (int8) when asymmetric.
- `float-quantized`: `weight` as float8_e4m3fn and `weight_scale` per tensor, row, group or
  block: kept as e4m3 codes for `Fp8Linear` (CUDA) and dequantized for every other case.
An optional `weight_g_idx` (older act-order checkpoints) gives each column's group.
"""

from __future__ import annotations

import torch

from llmd.errors import UnsupportedQuantizationError
from llmd.quantization.fp8_linear import Fp8Weight
from llmd.quantization.grouped_weight import GroupedIntWeight
from llmd.quantization.int_packing import unpack_int32
from llmd.quantization.module_tensors import ModuleTensors
from llmd.quantization.scale_layout import FLOAT_SCALE_DTYPES, full_scales, row_group_tensor
from llmd.quantization.weight_scheme import WeightScheme

TENSOR_SUFFIXES = (
    "weight",
    "weight_packed",
    "weight_scale",
    "weight_shape",
    "weight_zero_point",
    "weight_g_idx",
    "input_scale",
    "input_zero_point",
)
"""What compressed-tensors may store for a quantized linear (input_* are static activation
scales, read and unused: llmd's CPU kernels are weight-only)."""
ZERO_POINT_DTYPES = (torch.int8, torch.int32, torch.int16)


def read_compressed_tensors(
    tensors: ModuleTensors, scheme: WeightScheme
) -> GroupedIntWeight | Fp8Weight | torch.Tensor:
    """The layer's weight: integer codes with scales, fp8 codes, or (int blocks) dense."""
    if scheme.is_float:
        return read_fp8(tensors, scheme)
    out_features, in_features = tensors.shape
    offset = 1 << (scheme.num_bits - 1)
    if scheme.format == "pack-quantized":
        stored_shape = tensors.require("weight_shape", (torch.int64, torch.int32), (2,))
        if tuple(stored_shape.tolist()) != tensors.shape:
            raise UnsupportedQuantizationError(
                f"checkpoint tensor {tensors.name('weight_shape')!r} says "
                f"{tuple(stored_shape.tolist())}, expected {tensors.shape} from the config",
                "model",
            )
        words = -(-in_features * scheme.num_bits // 32)
        packed = tensors.require("weight_packed", (torch.int32,), (out_features, words))
        codes = unpack_int32(packed, scheme.num_bits)[:, :in_features]
        values = (codes - offset).to(torch.int8)
    else:
        values = tensors.require("weight", (torch.int8,), tensors.shape)
    if scheme.strategy == "block":
        return (values.float() - _block_zero_points(tensors, scheme)) * full_scales(tensors, scheme)
    scales = row_group_tensor(tensors, "weight_scale", scheme, FLOAT_SCALE_DTYPES).float()
    zero_points = None
    if not scheme.is_symmetric:
        zero_points = _zero_points(tensors, scheme, scales.shape[1], offset)
    group_ids = None
    if tensors.has("weight_g_idx"):
        group_ids = tensors.require("weight_g_idx", (torch.int32, torch.int64), (in_features,)).to(
            torch.int64
        )
    return GroupedIntWeight(
        values=values,
        scales=scales.contiguous(),
        zero_points=zero_points,
        group_size=(scheme.group_size or in_features)
        if scheme.strategy == "group"
        else in_features,
        num_bits=scheme.num_bits,
        group_ids=group_ids,
    )


def read_fp8(
    tensors: ModuleTensors, scheme: WeightScheme, scale_suffix: str = "weight_scale"
) -> Fp8Weight:
    """An fp8 `weight` with its scales `scale_suffix` (per tensor, row, group or block),
    and dense."""
    weight = tensors.require("weight", (torch.float8_e4m3fn,), tensors.shape)
    dense = weight.float() * full_scales(tensors, scheme, scale_suffix)
    row_scales = None
    if scheme.strategy in ("tensor", "channel"):
        scales = row_group_tensor(tensors, scale_suffix, scheme, FLOAT_SCALE_DTYPES)
        row_scales = scales.float().reshape(-1).contiguous()
    return Fp8Weight(codes=weight, row_scales=row_scales, dense=dense)


def _zero_points(
    tensors: ModuleTensors, scheme: WeightScheme, num_groups: int, offset: int
) -> torch.Tensor:
    """[N, G] int16 zero points in the codes' signed domain."""
    out_features = tensors.shape[0]
    if scheme.format != "pack-quantized" or scheme.strategy not in ("group", "channel"):
        zero_points = row_group_tensor(tensors, "weight_zero_point", scheme, ZERO_POINT_DTYPES)
        return zero_points.to(torch.int16).contiguous()
    words = -(-out_features * scheme.num_bits // 32)
    stored = tensors.require("weight_zero_point", ZERO_POINT_DTYPES)
    if tuple(stored.shape) == (out_features, num_groups) and words != out_features:
        return stored.to(torch.int16).contiguous()  # written unpacked (older versions)
    packed = tensors.require("weight_zero_point", (torch.int32,), (words, num_groups))
    codes = unpack_int32(packed.t().contiguous(), scheme.num_bits)[:, :out_features]  # [G, N]
    return (codes.t() - offset).contiguous()


def _block_zero_points(tensors: ModuleTensors, scheme: WeightScheme) -> float:
    """Integer block schemes are symmetric in llm-compressor; refuse others rather than guess."""
    if not scheme.is_symmetric:
        raise UnsupportedQuantizationError(
            f"{tensors.name('weight_zero_point')!r}: asymmetric integer block scales are not "
            "supported",
            "model",
        )
    return 0.0
