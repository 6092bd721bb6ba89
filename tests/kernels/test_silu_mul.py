"""SiLU-and-multiply kernel against its torch reference."""

from __future__ import annotations

import pytest
import torch

from llmd.errors import InvalidParameterError
from llmd.kernels.silu_mul import silu_mul, silu_mul_reference
from tests.kernels.tolerances import elementwise_tolerance


@pytest.mark.parametrize(
    ("num_tokens", "intermediate", "dtype"),
    [(3, 64, torch.float32), (2, 1100, torch.bfloat16), (5, 96, torch.float16)],
)
def test_matches_reference(device, num_tokens, intermediate, dtype):
    generator = torch.Generator().manual_seed(0)
    x = (4 * torch.randn(num_tokens, 2 * intermediate, generator=generator)).to(dtype)
    out = silu_mul(x.to(device))
    assert out.shape == (num_tokens, intermediate) and out.dtype == dtype
    torch.testing.assert_close(out.cpu(), silu_mul_reference(x), **elementwise_tolerance(dtype))


def test_strided_rows(device):
    wide = torch.randn(4, 300, device=device)
    x = wide[:, 10:138]  # [4, 128] with row stride 300
    torch.testing.assert_close(silu_mul(x), silu_mul_reference(x), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize(
    "make_bad",
    [
        lambda: torch.randn(3, 7),  # odd width
        lambda: torch.randn(3, 8).to(torch.int32),
        lambda: torch.randn(3, 2, 8),
        lambda: torch.randn(3, 16)[:, ::2],
        lambda: [[1.0, 2.0]],
    ],
)
def test_rejects_bad_inputs(make_bad, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(InvalidParameterError) as error:
        silu_mul(make_bad())
    assert error.value.parameter == "x"
