"""Reads one linear's tensors in GPTQ's format (AutoGPTQ / GPTQModel) into a `GroupedIntWeight`.

GPTQ stores `qweight` [K/8, N] int32 with eight 4-bit codes per word along the input dim,
lowest bits first; `qzeros` [G, N/8] packed along the output dim, each zero point minus
one in the v1 format (`checkpoint_format: gptq`) and as is in v2; `scales` [G, N]; and
`g_idx` [K], the group of each input column, which act-order (desc_act) permutes.
"""

from __future__ import annotations

import torch

from llmd.errors import UnsupportedQuantizationError
from llmd.quantization.grouped_weight import GroupedIntWeight, sequential_group_ids
from llmd.quantization.int_packing import unpack_int32
from llmd.quantization.module_tensors import ModuleTensors
from llmd.quantization.scale_layout import FLOAT_SCALE_DTYPES
from llmd.quantization.weight_scheme import WeightScheme

TENSOR_SUFFIXES = ("qweight", "qzeros", "scales", "g_idx")
CODE_OFFSET = 8


def read_gptq(tensors: ModuleTensors, scheme: WeightScheme) -> GroupedIntWeight:
    """The layer's codes, scales, zero points and (act-order) column groups."""
    out_features, in_features = tensors.shape
    group_size = scheme.group_size or in_features
    num_groups = -(-in_features // group_size)
    if in_features % 8 or out_features % 8:
        raise UnsupportedQuantizationError(
            f"{tensors.name('qweight')!r}: GPTQ packing needs both dims of {tensors.shape} "
            "to be multiples of 8",
            "model",
        )
    qweight = tensors.require("qweight", (torch.int32,), (in_features // 8, out_features))
    qzeros = tensors.require("qzeros", (torch.int32,), (num_groups, out_features // 8))
    scales = tensors.require("scales", FLOAT_SCALE_DTYPES, (num_groups, out_features))
    codes = unpack_int32(qweight.t().contiguous(), 4)  # [N, K]
    zeros = unpack_int32(qzeros, 4) + scheme.gptq_zero_offset  # [G, N]
    group_ids = None
    if tensors.has("g_idx"):
        group_ids = tensors.require("g_idx", (torch.int32, torch.int64), (in_features,))
        group_ids = group_ids.to(torch.int64)
        if int(group_ids.min()) < 0 or int(group_ids.max()) >= num_groups:
            raise UnsupportedQuantizationError(
                f"checkpoint tensor {tensors.name('g_idx')!r} holds groups outside "
                f"0..{num_groups - 1}",
                "model",
            )
        if sequential_group_ids(group_ids, group_size):
            group_ids = None
    return GroupedIntWeight(
        values=(codes - CODE_OFFSET).to(torch.int8).contiguous(),
        scales=scales.t().float().contiguous(),
        zero_points=(zeros.t() - CODE_OFFSET).contiguous(),
        group_size=group_size,
        num_bits=4,
        group_ids=group_ids,
    )
