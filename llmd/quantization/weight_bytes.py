"""`model_weight_bytes`: what a model's weights take in memory, quantized codes and scales included.

A decode step reads every weight once, so this is the figure status, top and the offline
benchmark put next to the decode step's time; counted once per storage (tied embeddings).
"""

from __future__ import annotations

from torch import nn

from llmd.quantization.int4_linear import Int4Linear
from llmd.quantization.int8_linear import Int8Linear
from llmd.quantization.triton_int4_linear import TritonInt4Linear

QUANTIZED_LAYERS = (Int4Linear, Int8Linear, TritonInt4Linear)
"""Layers whose weights are buffers (codes, scales, zeros) rather than parameters."""


def model_weight_bytes(model: nn.Module) -> int:
    """Bytes of `model`'s parameters and of its quantized layers' buffers, each storage once."""
    tensors = list(model.parameters())
    for module in model.modules():
        if isinstance(module, QUANTIZED_LAYERS):
            tensors.extend(buffer for buffer in module.buffers(recurse=False) if buffer is not None)
    seen: set[int] = set()
    total = 0
    for tensor in tensors:
        key = tensor.untyped_storage().data_ptr()
        if key in seen:
            continue
        seen.add(key)
        total += tensor.numel() * tensor.element_size()
    return total
