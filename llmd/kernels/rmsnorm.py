"""RMSNorm and fused residual-add + RMSNorm, rounding exactly where HF transformers does.

Norms run twice per layer and are purely memory-bound, so fusing the residual add saves a
full read and write of the hidden states; matching HF's rounding keeps outputs comparable.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from llmd.errors import InvalidParameterError, require
from llmd.kernels import checks

MAX_HIDDEN_SIZE = 65536


@triton.jit
def _rms_norm_kernel(
    out_ptr,  # [num_rows, hidden] contiguous
    residual_out_ptr,  # [num_rows, hidden] contiguous (HAS_RESIDUAL)
    x_ptr,  # rows addressed by (row // inner) * stride_x_outer + (row % inner) * stride_x_inner
    residual_ptr,  # [num_rows, hidden] contiguous (HAS_RESIDUAL)
    weight_ptr,  # [hidden]
    eps,
    num_inner_rows,
    stride_x_outer,
    stride_x_inner,
    HIDDEN: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
):
    """One program: normalise one row in fp32; with a residual, add it first (rounded)."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < HIDDEN
    x_row = (
        x_ptr + (row // num_inner_rows) * stride_x_outer + (row % num_inner_rows) * stride_x_inner
    )
    x = tl.load(x_row + offs, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        residual = tl.load(residual_ptr + row * HIDDEN + offs, mask=mask, other=0.0)
        x = (x.to(tl.float32) + residual.to(tl.float32)).to(x.dtype)  # HF adds in model dtype
        tl.store(residual_out_ptr + row * HIDDEN + offs, x, mask=mask)
    x_f32 = x.to(tl.float32)
    variance = tl.sum(x_f32 * x_f32, 0) / HIDDEN
    normed = (x_f32 * tl.rsqrt(variance + eps)).to(x.dtype)  # HF rounds before the weight
    weight = tl.load(weight_ptr + offs, mask=mask, other=0.0)
    out = normed.to(tl.float32) * weight.to(tl.float32)
    tl.store(out_ptr + row * HIDDEN + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


def _row_layout(x: torch.Tensor) -> tuple[int, int, int]:
    """(num_inner_rows, stride_outer, stride_inner) addressing the rows of a 2D or 3D `x`."""
    if x.dim() == 2:
        return 1, x.stride(0), 0
    return x.shape[1], x.stride(0), x.stride(1)


def _check_inputs(x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """Raise a typed error for any input that breaks the kernel's contract."""
    checks.check_tensor(x, "x")
    checks.check_tensor(weight, "weight")
    checks.check_dtype(x, "x", checks.FLOAT_DTYPES)
    require(
        x.dim() in (2, 3),
        "x",
        f"must be [num_tokens, hidden] or [num_tokens, num_heads, head_dim], got {tuple(x.shape)}",
    )
    hidden = x.shape[-1]
    require(0 < hidden <= MAX_HIDDEN_SIZE, "x", f"last dim must be in [1, {MAX_HIDDEN_SIZE}]")
    checks.check_last_dim_contiguous(x, "x")
    checks.check_shape(weight, "weight", (hidden,))
    checks.check_same_dtype(weight, "weight", x.dtype)
    checks.check_last_dim_contiguous(weight, "weight")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        raise InvalidParameterError(f"must be a positive float, got {eps!r}", "eps")


def _launch(x, residual, weight, eps, out, residual_out) -> None:
    """Launch one program per row of `x`; without a residual, `x` stands in for its pointers."""
    hidden = x.shape[-1]
    num_rows = x.numel() // hidden
    if num_rows == 0:
        return
    block = checks.next_power_of_2(hidden)
    num_inner_rows, stride_outer, stride_inner = _row_layout(x)
    _rms_norm_kernel[(num_rows,)](
        out,
        x if residual_out is None else residual_out,
        x,
        x if residual is None else residual,
        weight,
        float(eps),
        num_inner_rows,
        stride_outer,
        stride_inner,
        HIDDEN=hidden,
        BLOCK=block,
        HAS_RESIDUAL=residual is not None,
        num_warps=max(1, min(16, block // 512)),
    )


def rms_norm(
    x: torch.Tensor,  # [num_tokens, hidden] or [num_tokens, num_heads, head_dim]
    weight: torch.Tensor,  # [hidden]
    eps: float,
) -> torch.Tensor:  # contiguous, same shape and dtype as x
    """HF RMSNorm: `weight * (x * rsqrt(mean(x^2) + eps)).to(x.dtype)`, reduced in fp32.

    `x` may be a strided view (e.g. per-head q/k of a fused qkv output) if its last dim is
    contiguous.
    """
    _check_inputs(x, weight, eps)
    checks.check_devices({"x": x, "weight": weight})
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _launch(x, None, weight, eps, out, None)
    return out


def fused_add_rms_norm(
    x: torch.Tensor,  # [num_tokens, hidden]
    residual: torch.Tensor,  # [num_tokens, hidden]
    weight: torch.Tensor,  # [hidden]
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:  # (normed, new_residual), both [num_tokens, hidden]
    """HF order: `new_residual = x + residual` (in x's dtype), then `rms_norm(new_residual)`."""
    _check_inputs(x, weight, eps)
    checks.check_tensor(residual, "residual")
    require(x.dim() == 2, "x", f"must be [num_tokens, hidden], got {tuple(x.shape)}")
    checks.check_shape(residual, "residual", tuple(x.shape))
    checks.check_same_dtype(residual, "residual", x.dtype)
    require(
        residual.is_contiguous(),
        "residual",
        f"must be contiguous, got strides {residual.stride()}",
    )
    checks.check_devices({"x": x, "residual": residual, "weight": weight})
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    new_residual = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _launch(x, residual, weight, eps, out, new_residual)
    return out, new_residual


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF transformers' LlamaRMSNorm forward, written out in torch."""
    x_f32 = x.float()
    variance = x_f32.pow(2).mean(-1, keepdim=True)
    return weight * (x_f32 * torch.rsqrt(variance + eps)).to(x.dtype)


def fused_add_rms_norm_reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """HF decoder-layer order: add the residual in model dtype, then RMSNorm the sum."""
    new_residual = x + residual
    return rms_norm_reference(new_residual, weight, eps), new_residual
