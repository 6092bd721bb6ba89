"""Paged chunked-prefill attention kernel against its torch reference."""

from __future__ import annotations

import itertools

import pytest
import torch

from llmd.errors import InvalidParameterError
from llmd.kernels.prefill_attention import prefill_attention, prefill_attention_reference
from tests.kernels.paged_cases import make_paged_kv
from tests.kernels.tolerances import attention_tolerance

FIRST_ROW = 2
"""Chunks start at this row, as after decodes; rows before it must stay untouched."""

# (query heads per KV head, num_kv_heads, head_dim, block_size, dtype, chunk lengths,
#  context lengths); a chunk shorter than its context continues a cached prefix.
CASES = [
    (1, 2, 64, 16, torch.float32, [16, 5, 1], [16, 37, 32]),
    (4, 2, 128, 32, torch.bfloat16, [40, 7], [40, 71]),
    (4, 1, 64, 16, torch.float16, [33, 1, 17], [65, 20, 17]),
    (1, 1, 128, 32, torch.float32, [64], [96]),
]


def _run_case(
    device, group_size, num_kv_heads, head_dim, block_size, dtype, query_lens, seq_lens, **kwargs
):
    """Return (kernel output, reference output) for one random paged batch of chunks."""
    paged = make_paged_kv(seq_lens, block_size, num_kv_heads, head_dim, dtype, device)
    starts = [FIRST_ROW + offset for offset in itertools.accumulate([0, *query_lens])]
    query_start_loc = torch.tensor(starts, dtype=torch.int32, device=device)
    num_rows = starts[-1] + 1  # one trailing padding row as well
    generator = torch.Generator().manual_seed(1)
    query = torch.randn(num_rows, num_kv_heads * group_size, head_dim, generator=generator)
    query = query.to(device=device, dtype=dtype)
    out = torch.full_like(query, 7.0)
    args = (query, paged.k_cache, paged.v_cache, paged.block_tables, paged.seq_lens)
    scale = head_dim**-0.5
    prefill_attention(*args, query_start_loc, max(query_lens), scale, out=out, **kwargs)
    expected = prefill_attention_reference(*args, query_start_loc, scale)
    untouched = torch.ones(num_rows, dtype=torch.bool)
    untouched[FIRST_ROW : starts[-1]] = False
    assert (out[untouched] == 7.0).all(), "wrote rows outside the chunks"
    expected[untouched] = 7.0
    return out, expected


@pytest.mark.parametrize(
    ("group_size", "num_kv_heads", "head_dim", "block_size", "dtype", "query_lens", "seq_lens"),
    CASES,
)
def test_matches_reference(
    device, group_size, num_kv_heads, head_dim, block_size, dtype, query_lens, seq_lens
):
    out, expected = _run_case(
        device, group_size, num_kv_heads, head_dim, block_size, dtype, query_lens, seq_lens
    )
    assert torch.isfinite(out.float()).all(), "read a NaN slot (padding or past a context)"
    torch.testing.assert_close(out, expected, **attention_tolerance(dtype))


@pytest.mark.parametrize(("block_m", "block_n"), [(16, 16), (32, 128), (128, 32)])
def test_tile_sizes(device, block_m, block_n):
    out, expected = _run_case(
        device, 4, 1, 64, 16, torch.float32, [20, 3, 33], [52, 3, 40],
        block_m=block_m, block_n=block_n,
    )  # fmt: skip
    torch.testing.assert_close(out, expected, **attention_tolerance(torch.float32))


def test_group_size_and_head_dim_not_powers_of_two(device):
    out, expected = _run_case(device, 3, 2, 80, 16, torch.float32, [9, 18], [9, 30])
    torch.testing.assert_close(out, expected, **attention_tolerance(torch.float32))


def _valid_inputs() -> dict:
    """A valid CPU call that the bad-input tests break one argument at a time."""
    return {
        "query": torch.randn(6, 4, 64),
        "k_cache": torch.randn(8, 16, 2, 64),
        "v_cache": torch.randn(8, 16, 2, 64),
        "block_tables": torch.zeros(2, 3, dtype=torch.int32),
        "seq_lens": torch.tensor([3, 3], dtype=torch.int32),
        "query_start_loc": torch.tensor([0, 3, 6], dtype=torch.int32),
        "max_query_len": 3,
        "scale": 0.125,
    }


BAD_INPUTS = [
    ("k_cache", lambda a: a["k_cache"].bfloat16()),
    ("query", lambda a: a["query"].to(torch.int64)),
    ("query", lambda a: torch.randn(6, 4, 128)[..., ::2]),  # last dim not contiguous
    ("query", lambda a: torch.randn(6, 3, 64)),  # 3 heads over 2 KV heads
    ("k_cache", lambda a: torch.randn(8, 16, 2, 128)),  # head_dim mismatch
    ("v_cache", lambda a: torch.randn(8, 8, 2, 64)),
    ("block_tables", lambda a: torch.zeros(2, 3, dtype=torch.float32)),
    ("seq_lens", lambda a: torch.tensor([3, 3, 3], dtype=torch.int32)),
    ("query_start_loc", lambda a: torch.tensor([0, 6], dtype=torch.int32)),
    ("query_start_loc", lambda a: a["query_start_loc"].float()),
    ("max_query_len", lambda a: 2.5),
    ("scale", lambda a: 0.0),
    ("block_m", lambda a: 24),
    ("block_n", lambda a: 8),
]


@pytest.mark.parametrize(("name", "make_bad"), BAD_INPUTS)
def test_rejects_bad_inputs(name, make_bad, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # CPU tensors are valid: only `name` is bad
    inputs = _valid_inputs()
    inputs[name] = make_bad(inputs)
    with pytest.raises(InvalidParameterError) as error:
        prefill_attention(**inputs)
    assert error.value.parameter == name


def test_rejects_tensors_on_different_devices(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    inputs = _valid_inputs()
    inputs["seq_lens"] = inputs["seq_lens"].to("meta")
    with pytest.raises(InvalidParameterError, match="same device") as error:
        prefill_attention(**inputs)
    assert error.value.parameter == "seq_lens"
