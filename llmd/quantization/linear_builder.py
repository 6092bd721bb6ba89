"""Chooses and builds the layer that runs one quantized linear on the engine's device.

On CPU, int8 per-row weights run on torch's int8 kernel and 4-bit weights on its int4
kernel; everything else (fp8, int8 groups, other devices, shards that cannot share a
kernel) is dequantized once to a dense `nn.Linear` in the model's dtype, which the CPU
runner then prepacks like any other.
"""

from __future__ import annotations

import torch
from torch import nn

from llmd.quantization.grouped_weight import GroupedIntWeight, concat_rows
from llmd.quantization.int4_linear import Int4Linear, can_run_int4
from llmd.quantization.int8_linear import Int8Linear, can_run_int8

DENSE = "dense"
"""The kind of a linear dequantized at load."""


def build_linear(
    shards: list[GroupedIntWeight | torch.Tensor],
    bias: torch.Tensor | None,
    dtype: torch.dtype,
    device: torch.device,
    is_dense: bool = False,
) -> tuple[nn.Module, str]:
    """The layer for the rows of `shards` stacked, and its kind ("int4", "int8", "dense");
    always dense when `is_dense`."""
    combined = None
    if not is_dense and all(isinstance(shard, GroupedIntWeight) for shard in shards):
        combined = concat_rows([shard for shard in shards if isinstance(shard, GroupedIntWeight)])
    if combined is not None and can_run_int4(combined, device):
        return Int4Linear(combined, _on(bias, device), dtype).to(device), "int4"
    if combined is not None and can_run_int8(combined, device):
        return Int8Linear(combined, _on(bias, device), dtype).to(device), "int8"
    dense = torch.cat(
        [shard.dequantize() if isinstance(shard, GroupedIntWeight) else shard for shard in shards]
    )  # [N, K] float32
    linear = nn.Linear(dense.shape[1], dense.shape[0], bias=bias is not None, device=device)
    linear = linear.to(dtype)
    with torch.no_grad():
        linear.weight.copy_(dense)
        if bias is not None:
            linear.bias.copy_(bias)
    return linear.requires_grad_(False), DENSE


def _on(bias: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    return None if bias is None else bias.detach().to(device)
