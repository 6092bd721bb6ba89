"""Scale (and zero-point) tensors of every strategy brought to one [N, G] per-row layout.

compressed-tensors stores one scale per tensor, per row ([N, 1]), per group ([N, G]) or
per 2-D block; the integer readers want [N, G] and the fp8 dequantizer wants [N, K], and
both are derived here with the shape each strategy implies checked first.
"""

from __future__ import annotations

import torch

from llmd.quantization.module_tensors import ModuleTensors
from llmd.quantization.weight_scheme import WeightScheme

FLOAT_SCALE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def num_groups(scheme: WeightScheme, in_features: int) -> int:
    """Scales per row under `scheme` (1 unless grouped)."""
    if scheme.strategy == "group" and scheme.group_size:
        return -(-in_features // scheme.group_size)
    return 1


def row_group_tensor(
    tensors: ModuleTensors, suffix: str, scheme: WeightScheme, dtypes: tuple[torch.dtype, ...]
) -> torch.Tensor:
    """The tensor `suffix` (a scale or zero point) as [N, G], from any non-block strategy."""
    out_features, in_features = tensors.shape
    tensor = tensors.require(suffix, dtypes)
    if scheme.strategy == "tensor":
        tensors.check_shape(suffix, tensor.reshape(-1), (1,))
        return tensor.reshape(1, 1).expand(out_features, 1)
    if scheme.strategy == "channel":
        if tensor.dim() == 1:
            tensor = tensor.unsqueeze(1)
        tensors.check_shape(suffix, tensor, (out_features, 1))
        return tensor
    tensors.check_shape(suffix, tensor, (out_features, num_groups(scheme, in_features)))
    return tensor


def full_scales(
    tensors: ModuleTensors, scheme: WeightScheme, suffix: str = "weight_scale"
) -> torch.Tensor:
    """The scales `suffix` expanded to [N, K] float32 (blocks included, edge blocks cut
    short): for dequantizing."""
    out_features, in_features = tensors.shape
    if scheme.strategy == "block" and scheme.block_structure is not None:
        block_rows, block_cols = scheme.block_structure
        expected = (-(-out_features // block_rows), -(-in_features // block_cols))
        scale = tensors.require(suffix, FLOAT_SCALE_DTYPES, expected).float()
        rows = scale.repeat_interleave(block_rows, dim=0)[:out_features]
        return rows.repeat_interleave(block_cols, dim=1)[:, :in_features]
    scale = row_group_tensor(tensors, suffix, scheme, FLOAT_SCALE_DTYPES).float()
    columns_per_scale = scheme.group_size if scheme.strategy == "group" else in_features
    return scale.repeat_interleave(columns_per_scale or in_features, dim=1)[:, :in_features]
