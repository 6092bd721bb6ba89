"""`DecodeKernel`: a weight-only C++ linear kernel bound to one layer's operands.

The int8 and int4 layers share it, so both take the same short path on decode-sized batches
and agree on where that path ends (`CPU_KERNEL_MAX_ROWS`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

CPU_KERNEL_MAX_ROWS = 16
"""Most rows a call runs on llmd's C++ kernels; more (a prefill, a large decode batch) take
the dense path, dequantize then GEMM: on one Xeon thread, gate_up (3072 x 576) in bf16 at 16
rows took 0.72-0.76 ms on the kernels against 0.84-1.19 dequantized, at 32 rows 1.36-1.62
against 0.91-0.98, and at 512 rows 2.6 ms against aten's 24-26."""


class DecodeKernel:
    """A weight-only C++ kernel bound to one layer's operands: out = op(out, rows, *operands).

    A decode step calls each linear once per layer, so the few microseconds of Python that
    reshapes, buffer lookups and the op packet cost are a visible share of a batch-1 step:
    this path takes 2-D rows as they come and goes straight to the op's overload."""

    def __init__(self, op: Callable[..., None], operands: tuple, layer: nn.Module) -> None:
        self.op = op
        self.operands = operands
        self.out_features = layer.out_features
        self.in_features = layer.in_features
        self.dtype = layer.dtype

    def takes(self, hidden: torch.Tensor) -> bool:
        """Whether `hidden` is decode-sized [M <= CPU_KERNEL_MAX_ROWS, in_features] rows of
        the layer's dtype with contiguous rows, as the kernel reads them."""
        return (
            hidden.dim() == 2
            and hidden.shape[0] <= CPU_KERNEL_MAX_ROWS
            and hidden.dtype == self.dtype
            and hidden.stride(-1) == 1
            and hidden.shape[1] == self.in_features
        )

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        """[M, in_features] -> [M, out_features]."""
        out = hidden.new_empty(hidden.shape[0], self.out_features)
        self.op(out, hidden, *self.operands)
        return out
