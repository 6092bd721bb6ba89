"""Reads one linear's tensors in AutoAWQ's GEMM format into a `GroupedIntWeight`.

AWQ stores the transposed weight: `qweight` [K, N/8] int32 with eight 4-bit codes per
word along the output dim in the interleaved order (0, 2, 4, 6, 1, 3, 5, 7), `qzeros`
[G, N/8] packed the same way (unsigned zero points, no offset) and `scales` [G, N];
w[n, k] = (q - z) * s per group of `group_size` input columns.
"""

from __future__ import annotations

import torch

from llmd.errors import UnsupportedQuantizationError
from llmd.quantization.grouped_weight import GroupedIntWeight
from llmd.quantization.int_packing import AWQ_NIBBLE_ORDER, unpack_int32
from llmd.quantization.module_tensors import ModuleTensors
from llmd.quantization.scale_layout import FLOAT_SCALE_DTYPES
from llmd.quantization.weight_scheme import WeightScheme

TENSOR_SUFFIXES = ("qweight", "qzeros", "scales")
CODE_OFFSET = 8
"""Unsigned 4-bit codes minus this are the signed codes `GroupedIntWeight` holds."""


def read_awq(tensors: ModuleTensors, scheme: WeightScheme) -> GroupedIntWeight:
    """The layer's codes, scales and zero points, rows = output features."""
    out_features, in_features = tensors.shape
    group_size = scheme.group_size or in_features
    num_groups = -(-in_features // group_size)
    if out_features % 8:
        raise UnsupportedQuantizationError(
            f"{tensors.name('qweight')!r}: AWQ packing needs {out_features} output features "
            "to be a multiple of 8",
            "model",
        )
    qweight = tensors.require("qweight", (torch.int32,), (in_features, out_features // 8))
    qzeros = tensors.require("qzeros", (torch.int32,), (num_groups, out_features // 8))
    scales = tensors.require("scales", FLOAT_SCALE_DTYPES, (num_groups, out_features))
    codes = unpack_int32(qweight, 4, AWQ_NIBBLE_ORDER)  # [K, N]
    zeros = unpack_int32(qzeros, 4, AWQ_NIBBLE_ORDER)  # [G, N]
    return GroupedIntWeight(
        values=(codes.t() - CODE_OFFSET).to(torch.int8).contiguous(),
        scales=scales.t().float().contiguous(),
        zero_points=(zeros.t() - CODE_OFFSET).contiguous(),
        group_size=group_size,
        num_bits=4,
    )
