"""Rotary embedding kernel (in place, neox layout) against its HF-formula torch reference."""

from __future__ import annotations

import pytest
import torch

from llmd.errors import InvalidParameterError
from llmd.kernels.rotary import rotary_embedding, rotary_embedding_reference
from tests.kernels.tolerances import elementwise_tolerance


def _cos_sin(max_positions: int, head_dim: int, full_width: bool) -> tuple:
    """HF-style cos/sin tables: [max_positions, head_dim // 2], or duplicated halves."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.outer(torch.arange(max_positions).float(), inv_freq)
    if full_width:
        freqs = torch.cat([freqs, freqs], dim=-1)
    return freqs.cos(), freqs.sin()


@pytest.mark.parametrize(
    ("num_heads", "num_kv_heads", "head_dim", "dtype", "full_width"),
    [
        (4, 1, 64, torch.float32, False),
        (2, 2, 128, torch.bfloat16, True),
        (3, 1, 64, torch.float16, True),
    ],
)
def test_matches_reference_in_place_on_qkv_views(
    device, num_heads, num_kv_heads, head_dim, dtype, full_width
):
    num_tokens, max_positions = 5, 64
    generator = torch.Generator().manual_seed(0)
    # q and k as views of a fused qkv output, as the attention layer produces them.
    width = (num_heads + 2 * num_kv_heads) * head_dim
    qkv = torch.randn(num_tokens, width, generator=generator).to(device=device, dtype=dtype)
    query = qkv[:, : num_heads * head_dim].view(num_tokens, num_heads, head_dim)
    key_end = (num_heads + num_kv_heads) * head_dim
    key = qkv[:, num_heads * head_dim : key_end].view(num_tokens, num_kv_heads, head_dim)
    value_before = qkv[:, key_end:].clone()
    positions = torch.tensor([0, 63, 7, 7, 31], device=device)
    cos, sin = (table.to(device) for table in _cos_sin(max_positions, head_dim, full_width))
    expected_query, expected_key = rotary_embedding_reference(positions, query, key, cos, sin)

    rotary_embedding(positions, query, key, cos, sin)
    torch.testing.assert_close(query, expected_query, **elementwise_tolerance(dtype))
    torch.testing.assert_close(key, expected_key, **elementwise_tolerance(dtype))
    assert torch.equal(qkv[:, key_end:], value_before), "wrote outside q and k"


def test_position_zero_is_identity(device):
    query = torch.randn(1, 2, 64, device=device)
    key = torch.randn(1, 1, 64, device=device)
    query_before, key_before = query.clone(), key.clone()
    cos, sin = (table.to(device) for table in _cos_sin(4, 64, False))
    rotary_embedding(torch.zeros(1, dtype=torch.int32, device=device), query, key, cos, sin)
    torch.testing.assert_close(query, query_before)
    torch.testing.assert_close(key, key_before)


def _valid_inputs() -> dict:
    """A valid CPU call that the bad-input tests break one argument at a time."""
    cos, sin = _cos_sin(16, 64, False)
    return {
        "positions": torch.arange(3),
        "query": torch.randn(3, 2, 64),
        "key": torch.randn(3, 1, 64),
        "cos_cache": cos,
        "sin_cache": sin,
    }


BAD_INPUTS = [
    ("positions", lambda a: a["positions"].float()),
    ("positions", lambda a: torch.arange(4)),
    ("query", lambda a: torch.randn(3, 2, 63)),
    ("query", lambda a: torch.randn(3, 2, 128)[..., ::2]),
    ("key", lambda a: a["key"].half()),
    ("key", lambda a: torch.randn(3, 1, 32)),
    ("cos_cache", lambda a: torch.randn(16, 48)),
    ("sin_cache", lambda a: torch.randn(8, 32)),
    ("sin_cache", lambda a: a["sin_cache"].half()),
]


@pytest.mark.parametrize(("name", "make_bad"), BAD_INPUTS)
def test_rejects_bad_inputs(name, make_bad, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    inputs = _valid_inputs()
    inputs[name] = make_bad(inputs)
    with pytest.raises(InvalidParameterError) as error:
        rotary_embedding(**inputs)
    assert error.value.parameter == name
