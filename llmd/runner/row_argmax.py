"""The greedy sampler's argmax over each row of logits: torch's, or llmd's C++ op on the CPU.

torch's CPU argmax reduces bf16 rows element by element (2.9 ms for 32 x 49,152 logits on
two Xeon threads, ~5% of a decode step); the op's one vectorized pass takes ~0.25 ms and
picks the same index (the first maximum, or the first NaN), so greedy outputs are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from llmd.attention.cpu_extension import CPU_OP_DTYPES, load_cpu_ops

RowArgmax = Callable[[torch.Tensor], torch.Tensor]
"""logits [rows, vocab] -> int64 ids [rows]."""


def torch_row_argmax(logits: torch.Tensor) -> torch.Tensor:
    """torch's argmax over the last dimension (any device, any dtype)."""
    return logits.argmax(dim=-1)


def make_row_argmax(use_cpu_ops: bool) -> RowArgmax:
    """The C++ row argmax where the runner runs the C++ CPU ops, else torch's."""
    if not use_cpu_ops:
        return torch_row_argmax
    op = load_cpu_ops().row_argmax

    def cpu_row_argmax(logits: torch.Tensor) -> torch.Tensor:
        if logits.device.type != "cpu" or logits.dtype not in CPU_OP_DTYPES or logits.dim() != 2:
            return logits.argmax(dim=-1)
        rows = logits if logits.stride(-1) == 1 else logits.contiguous()
        out = torch.empty(rows.shape[0], dtype=torch.int64)  # [rows]
        op(out, rows)
        return out

    return cpu_row_argmax
