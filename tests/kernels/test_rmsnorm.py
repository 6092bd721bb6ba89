"""RMSNorm and fused residual-add RMSNorm kernels against their HF-order torch references."""

from __future__ import annotations

import pytest
import torch

from llmd.errors import InvalidParameterError
from llmd.kernels.rmsnorm import (
    fused_add_rms_norm,
    fused_add_rms_norm_reference,
    rms_norm,
    rms_norm_reference,
)
from tests.kernels.tolerances import elementwise_tolerance


def _weight(hidden: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """A non-trivial norm weight around 1."""
    generator = torch.Generator().manual_seed(3)
    return (1 + 0.1 * torch.randn(hidden, generator=generator)).to(device=device, dtype=dtype)


@pytest.mark.parametrize(
    ("num_tokens", "hidden", "dtype"),
    [(4, 64, torch.float32), (3, 96, torch.bfloat16), (5, 128, torch.float16)],
)
def test_rms_norm_matches_reference(device, num_tokens, hidden, dtype):
    generator = torch.Generator().manual_seed(0)
    x = (3 * torch.randn(num_tokens, hidden, generator=generator)).to(device=device, dtype=dtype)
    weight = _weight(hidden, dtype, device)
    out = rms_norm(x, weight, 1e-6)
    assert out.dtype == dtype and out.shape == x.shape
    torch.testing.assert_close(
        out, rms_norm_reference(x, weight, 1e-6), **elementwise_tolerance(dtype)
    )


def test_rms_norm_per_head_on_a_strided_view(device):
    # Per-head q-norm (Qwen3) on the q part of a fused qkv output: [tokens, heads, head_dim].
    num_tokens, num_heads, head_dim = 3, 4, 32
    qkv = torch.randn(num_tokens, (num_heads + 2) * head_dim, device=device)
    query = qkv[:, : num_heads * head_dim].view(num_tokens, num_heads, head_dim)
    weight = _weight(head_dim, torch.float32, device)
    out = rms_norm(query, weight, 1e-5)
    assert out.shape == query.shape and out.is_contiguous()
    expected = rms_norm_reference(query, weight, 1e-5)
    torch.testing.assert_close(out, expected, **elementwise_tolerance(torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_add_rms_norm_matches_reference(device, dtype):
    num_tokens, hidden = 4, 80
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(num_tokens, hidden, generator=generator).to(device=device, dtype=dtype)
    residual = torch.randn(num_tokens, hidden, generator=generator).to(device=device, dtype=dtype)
    weight = _weight(hidden, dtype, device)
    x_before, residual_before = x.clone(), residual.clone()
    out, new_residual = fused_add_rms_norm(x, residual, weight, 1e-6)
    expected_out, expected_residual = fused_add_rms_norm_reference(x, residual, weight, 1e-6)
    # The sum is rounded once, like torch; the interpreter truncates bf16 instead of rounding.
    is_exact = device == "cuda" or dtype == torch.float32
    residual_tolerance = {"atol": 0, "rtol": 0} if is_exact else elementwise_tolerance(dtype)
    torch.testing.assert_close(new_residual, expected_residual, **residual_tolerance)
    torch.testing.assert_close(out, expected_out, **elementwise_tolerance(dtype))
    assert torch.equal(x, x_before) and torch.equal(residual, residual_before)


BAD_INPUTS = [
    ("x", lambda x, w, r: (x.to(torch.int32), w, r)),
    ("x", lambda x, w, r: (x[:, ::2], w[:32], r)),  # last dim not contiguous
    ("x", lambda x, w, r: (x[0], w, r)),  # 1-D
    ("weight", lambda x, w, r: (x, w[:32], r)),
    ("weight", lambda x, w, r: (x, w.half(), r)),
    ("residual", lambda x, w, r: (x, w, r[:2])),
    ("residual", lambda x, w, r: (x, w, r.half())),
    ("residual", lambda x, w, r: (x, w, torch.randn(64, 4).t())),  # not contiguous
]


@pytest.mark.parametrize(("name", "make_bad"), BAD_INPUTS)
def test_rejects_bad_inputs(name, make_bad, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x, weight, residual = make_bad(torch.randn(4, 64), torch.ones(64), torch.randn(4, 64))
    with pytest.raises(InvalidParameterError) as error:
        fused_add_rms_norm(x, residual, weight, 1e-6)
    assert error.value.parameter == name


def test_rejects_non_positive_eps(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(InvalidParameterError) as error:
        rms_norm(torch.randn(2, 8), torch.ones(8), 0.0)
    assert error.value.parameter == "eps"
