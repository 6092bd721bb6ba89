"""SiLU(gate) * up from the fused gate/up projection output (gate in the first half).

The MLP's fused projection writes [gate | up] side by side; one pass reading both halves
and writing the product avoids materialising SiLU(gate) as a separate tensor.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from llmd.errors import require
from llmd.kernels.checks import (
    FLOAT_DTYPES,
    check_devices,
    check_dtype,
    check_last_dim_contiguous,
    check_shape,
    check_tensor,
)

BLOCK = 1024
"""Elements of one row handled by a program (several programs per row when wider)."""


@triton.jit
def _silu_mul_kernel(
    out_ptr,  # [num_tokens, intermediate] contiguous
    x_ptr,  # [num_tokens, 2 * intermediate], row stride stride_x_token
    stride_x_token,
    INTERMEDIATE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """One program: BLOCK columns of one token's SiLU(gate) * up, computed in fp32."""
    token = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < INTERMEDIATE
    gate_ptrs = x_ptr + token * stride_x_token + offs
    gate = tl.load(gate_ptrs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_ptrs + INTERMEDIATE, mask=mask, other=0.0).to(tl.float32)
    out = gate * tl.sigmoid(gate) * up
    tl.store(out_ptr + token * INTERMEDIATE + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


def silu_mul(x: torch.Tensor) -> torch.Tensor:  # x: [num_tokens, 2 * intermediate]
    """Return SiLU(x[:, :I]) * x[:, I:] as a new [num_tokens, I] tensor of x's dtype."""
    check_tensor(x, "x")
    check_dtype(x, "x", FLOAT_DTYPES)
    check_shape(x, "x", (None, None))
    num_tokens, width = x.shape
    require(width % 2 == 0, "x", f"last dim must be even (gate | up), got {width}")
    check_last_dim_contiguous(x, "x")
    check_devices({"x": x})
    intermediate = width // 2
    out = torch.empty((num_tokens, intermediate), dtype=x.dtype, device=x.device)
    if num_tokens == 0 or intermediate == 0:
        return out
    block = min(BLOCK, triton.next_power_of_2(intermediate))
    _silu_mul_kernel[(num_tokens, triton.cdiv(intermediate, block))](
        out,
        x,
        x.stride(0),
        INTERMEDIATE=intermediate,
        BLOCK=block,
        num_warps=4,
    )
    return out


def silu_mul_reference(x: torch.Tensor) -> torch.Tensor:  # x: [num_tokens, 2 * intermediate]
    """SiLU(gate) * up in fp32, rounded once to x's dtype."""
    gate, up = x.float().chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate) * up).to(x.dtype)
