"""Chooses and builds the layer that runs one quantized linear on the engine's device.

On CPU, int8 per-row weights run on torch's int8 kernel and 4-bit weights on its int4
kernel; on CUDA, 4-bit weights run on the Triton W4A16 GEMM where triton is installed, and
fp8 weights with row or tensor scales on `torch._scaled_mm` on sm_89+ (neither yet run on
a GPU); everything else (fp8 on CPU, fp8 blocks, int8 on CUDA, int8 groups, shards that
cannot share a kernel) is dequantized once to a dense `nn.Linear` in the model's dtype,
which the CPU runner then prepacks like any other.
"""

from __future__ import annotations

import torch
from torch import nn

from llmd.quantization.fp8_linear import Fp8Linear, Fp8Weight, can_run_fp8
from llmd.quantization.grouped_weight import GroupedIntWeight, concat_rows
from llmd.quantization.int4_linear import Int4Linear, can_run_int4
from llmd.quantization.int8_linear import Int8Linear, can_run_int8
from llmd.quantization.triton_int4_linear import TritonInt4Linear, can_run_triton_int4

DENSE = "dense"
"""The kind of a linear dequantized at load."""
TRITON_INT4 = "triton-int4"
"""The kind of a 4-bit linear on the Triton W4A16 GEMM (CUDA)."""


Shard = GroupedIntWeight | Fp8Weight | torch.Tensor
"""One HF projection's weight as a reader returns it (a tensor: already dense float32)."""


def dense_weight(shard: Shard) -> torch.Tensor:
    """[N, K] float32: the weight a shard stands for."""
    if isinstance(shard, GroupedIntWeight):
        return shard.dequantize()
    if isinstance(shard, Fp8Weight):
        return shard.dense
    return shard


def build_linear(
    shards: list[Shard],
    bias: torch.Tensor | None,
    dtype: torch.dtype,
    device: torch.device,
    is_dense: bool = False,
) -> tuple[nn.Module, str]:
    """The layer for the rows of `shards` stacked, and its kind ("int4", "triton-int4",
    "int8", "fp8", "dense"); always dense when `is_dense`."""
    combined = None
    if not is_dense and all(isinstance(shard, GroupedIntWeight) for shard in shards):
        combined = concat_rows([shard for shard in shards if isinstance(shard, GroupedIntWeight)])
    if combined is not None and can_run_int4(combined, device):
        return Int4Linear(combined, _on(bias, device), dtype).to(device), "int4"
    if combined is not None and can_run_int8(combined, device):
        return Int8Linear(combined, _on(bias, device), dtype).to(device), "int8"
    if combined is not None and can_run_triton_int4(combined, device):  # CUDA, 4 bits
        return TritonInt4Linear(combined, _on(bias, device), dtype).to(device), TRITON_INT4
    fp8_shards = [shard for shard in shards if isinstance(shard, Fp8Weight)]
    if not is_dense and len(fp8_shards) == len(shards) and can_run_fp8(fp8_shards, device):
        return Fp8Linear(fp8_shards, _on(bias, device), dtype).to(device), "fp8"
    dense = torch.cat([dense_weight(shard) for shard in shards])  # [N, K] float32
    linear = nn.Linear(dense.shape[1], dense.shape[0], bias=bias is not None, device=device)
    linear = linear.to(dtype)
    with torch.no_grad():
        linear.weight.copy_(dense)
        if bias is not None:
            linear.bias.copy_(bias)
    return linear.requires_grad_(False), DENSE


def _on(bias: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    return None if bias is None else bias.detach().to(device)
