"""assert_close tolerances per dtype for kernel outputs compared with torch references.

Elementwise kernels round once, so one unit in the last place would do on GPUs; the
interpreter truncates fp32 -> bf16 instead of rounding to nearest, and a kernel that rounds
twice (RMSNorm) can then drift by two bf16 ulps, hence the wider bf16 bound.
"""

from __future__ import annotations

import torch


def attention_tolerance(dtype: torch.dtype) -> dict[str, float]:
    """Tolerances for attention outputs (probabilities are rounded to dtype before P @ V)."""
    if dtype == torch.float32:
        return {"atol": 1e-5, "rtol": 1e-5}
    if dtype == torch.float16:
        return {"atol": 2e-3, "rtol": 2e-3}
    return {"atol": 2e-2, "rtol": 2e-2}


def elementwise_tolerance(dtype: torch.dtype) -> dict[str, float]:
    """Tolerances for outputs computed in fp32 and rounded once to `dtype`."""
    if dtype == torch.float32:
        return {"atol": 1e-5, "rtol": 1e-5}
    if dtype == torch.float16:
        return {"atol": 1e-3, "rtol": 1e-3}
    return {"atol": 2e-2, "rtol": 2e-2}
