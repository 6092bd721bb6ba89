"""KV store kernel against its torch reference: slots, padding (-1) and strided inputs."""

from __future__ import annotations

import pytest
import torch

from llmd.errors import InvalidParameterError
from llmd.kernels.kv_store import kv_store, kv_store_reference


@pytest.mark.parametrize(
    ("num_kv_heads", "head_dim", "block_size", "dtype"),
    [(2, 64, 16, torch.float32), (1, 128, 32, torch.bfloat16), (3, 80, 16, torch.float16)],
)
def test_matches_reference_and_skips_padding(device, num_kv_heads, head_dim, block_size, dtype):
    generator = torch.Generator().manual_seed(0)
    num_blocks, num_tokens = 6, 20
    # Distinct random slots, with three padding tokens (-1) that must write nothing.
    slots = torch.randperm(num_blocks * block_size, generator=generator)[:num_tokens]
    slots[[0, 7, 19]] = -1
    # key/value as views of a fused qkv output: strided tokens, contiguous head_dim.
    qkv = torch.randn(num_tokens, 3 * num_kv_heads * head_dim, generator=generator).to(dtype)
    key = qkv[:, num_kv_heads * head_dim : 2 * num_kv_heads * head_dim]
    value = qkv[:, 2 * num_kv_heads * head_dim :]
    key = key.view(num_tokens, num_kv_heads, head_dim)
    value = value.view(num_tokens, num_kv_heads, head_dim)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype)
    v_cache = torch.full(shape, float("nan"), dtype=dtype)
    k_expected, v_expected = k_cache.clone(), v_cache.clone()
    kv_store_reference(key, value, k_expected, v_expected, slots)

    k_cache, v_cache = k_cache.to(device), v_cache.to(device)
    kv_store(key.to(device), value.to(device), k_cache, v_cache, slots.to(device))
    torch.testing.assert_close(k_cache.cpu(), k_expected, atol=0, rtol=0, equal_nan=True)
    torch.testing.assert_close(v_cache.cpu(), v_expected, atol=0, rtol=0, equal_nan=True)
    assert torch.isnan(k_cache).sum() == torch.isnan(k_expected).sum() > 0


def test_int32_slots_and_empty_batch(device):
    k_cache = torch.zeros(2, 16, 1, 64, device=device)
    v_cache = torch.zeros_like(k_cache)
    key = torch.ones(2, 1, 64, device=device)
    slots = torch.tensor([17, -1], dtype=torch.int32, device=device)
    kv_store(key, key * 2, k_cache, v_cache, slots)
    assert (k_cache[1, 1] == 1).all() and (v_cache[1, 1] == 2).all()
    assert k_cache.sum() == 64 and v_cache.sum() == 128
    empty = torch.empty(0, 1, 64, device=device)
    kv_store(empty, empty, k_cache, v_cache, slots[:0])


def _valid_inputs() -> dict:
    """A valid CPU call that the bad-input tests break one argument at a time."""
    return {
        "key": torch.randn(4, 2, 64),
        "value": torch.randn(4, 2, 64),
        "k_cache": torch.zeros(3, 16, 2, 64),
        "v_cache": torch.zeros(3, 16, 2, 64),
        "slot_mapping": torch.arange(4),
    }


BAD_INPUTS = [
    ("key", lambda a: a["key"].to(torch.int32)),
    ("value", lambda a: a["value"].half()),
    ("k_cache", lambda a: a["k_cache"].half()),
    ("value", lambda a: torch.randn(4, 2, 32)),
    ("k_cache", lambda a: torch.zeros(3, 16, 1, 64)),
    ("v_cache", lambda a: torch.zeros(4, 16, 2, 64)),
    ("key", lambda a: torch.randn(4, 2, 128)[..., ::2]),
    ("slot_mapping", lambda a: torch.arange(5)),
    ("slot_mapping", lambda a: a["slot_mapping"].float()),
    ("slot_mapping", lambda a: torch.arange(8)[::2]),
]


@pytest.mark.parametrize(("name", "make_bad"), BAD_INPUTS)
def test_rejects_bad_inputs(name, make_bad, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # CPU tensors are valid: only `name` is bad
    inputs = _valid_inputs()
    inputs[name] = make_bad(inputs)
    with pytest.raises(InvalidParameterError) as error:
        kv_store(**inputs)
    assert error.value.parameter == name
