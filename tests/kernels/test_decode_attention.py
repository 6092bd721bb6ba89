"""Paged decode attention kernel against its torch reference, including split-K."""

from __future__ import annotations

import pytest
import torch

from llmd.errors import InvalidParameterError
from llmd.kernels.decode_attention import (
    choose_num_splits,
    decode_attention,
    decode_attention_reference,
)
from tests.kernels.paged_cases import make_paged_kv
from tests.kernels.tolerances import attention_tolerance

# (query heads per KV head, num_kv_heads, head_dim, block_size, dtype, context lengths)
CASES = [
    (1, 2, 64, 16, torch.float32, [1, 16, 17, 50]),
    (4, 2, 128, 32, torch.bfloat16, [32, 1, 33, 97]),
    (4, 1, 64, 16, torch.float16, [16, 31, 64]),
    (1, 1, 128, 32, torch.float16, [5, 64, 65]),
]


def _run_case(device, group_size, num_kv_heads, head_dim, block_size, dtype, seq_lens, **kwargs):
    """Return (kernel output, reference output) for one random paged batch."""
    paged = make_paged_kv(seq_lens, block_size, num_kv_heads, head_dim, dtype, device)
    generator = torch.Generator().manual_seed(1)
    query = torch.randn(len(seq_lens), num_kv_heads * group_size, head_dim, generator=generator)
    query = query.to(device=device, dtype=dtype)
    scale = head_dim**-0.5
    args = (query, paged.k_cache, paged.v_cache, paged.block_tables, paged.seq_lens, scale)
    kwargs.setdefault("split_tokens", 8)  # short test contexts still use several splits
    return decode_attention(*args, **kwargs), decode_attention_reference(*args)


@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize(
    ("group_size", "num_kv_heads", "head_dim", "block_size", "dtype", "seq_lens"), CASES
)
def test_matches_reference(
    device, num_splits, group_size, num_kv_heads, head_dim, block_size, dtype, seq_lens
):
    out, expected = _run_case(
        device, group_size, num_kv_heads, head_dim, block_size, dtype, seq_lens,
        num_splits=num_splits,
    )  # fmt: skip
    assert torch.isfinite(out.float()).all(), "read a NaN slot (padding or past a context)"
    torch.testing.assert_close(out, expected, **attention_tolerance(dtype))


@pytest.mark.parametrize(("block_n", "num_splits"), [(16, 1), (16, 4), (128, 2)])
def test_tile_sizes_smaller_and_larger_than_a_block(device, block_n, num_splits):
    out, expected = _run_case(
        device, 4, 1, 64, 32, torch.float32, [1, 31, 32, 33, 70],
        block_n=block_n, num_splits=num_splits,
    )  # fmt: skip
    torch.testing.assert_close(out, expected, **attention_tolerance(torch.float32))


def test_group_size_and_head_dim_not_powers_of_two(device):
    out, expected = _run_case(device, 3, 2, 80, 16, torch.float32, [7, 40], num_splits=2)
    torch.testing.assert_close(out, expected, **attention_tolerance(torch.float32))


@pytest.mark.parametrize("num_splits", [1, 4])
def test_empty_context_gives_zeros_and_out_is_filled_in_place(device, num_splits):
    paged = make_paged_kv([0, 20], 16, 1, 64, torch.float32, device)
    query = torch.randn(2, 2, 64, device=device)
    out = torch.full_like(query, float("nan"))
    args = (query, paged.k_cache, paged.v_cache, paged.block_tables, paged.seq_lens, 0.125)
    result = decode_attention(*args, out=out, num_splits=num_splits, split_tokens=8)
    assert result is out
    assert (out[0] == 0).all()
    torch.testing.assert_close(out, decode_attention_reference(*args))


def test_split_choice_depends_on_parallelism_and_length():
    # A full GPU (8 programs per SM: 1056 on 132 SMs) or short contexts: no split.
    assert choose_num_splits(num_seqs=256, num_kv_heads=8, max_seq_len=1024, num_sms=132) == 1
    assert choose_num_splits(num_seqs=1, num_kv_heads=8, max_seq_len=512, num_sms=132) == 1
    # Few sequences, long contexts: split until ~8 programs per SM, capped by length.
    assert choose_num_splits(num_seqs=128, num_kv_heads=8, max_seq_len=4096, num_sms=132) == 2
    assert choose_num_splits(num_seqs=32, num_kv_heads=8, max_seq_len=4096, num_sms=132) == 5
    assert choose_num_splits(num_seqs=64, num_kv_heads=8, max_seq_len=4096, num_sms=132) == 3
    assert choose_num_splits(num_seqs=1, num_kv_heads=8, max_seq_len=4096, num_sms=132) == 16
    assert choose_num_splits(num_seqs=1, num_kv_heads=8, max_seq_len=32768, num_sms=132) == 128
    assert choose_num_splits(num_seqs=1, num_kv_heads=1, max_seq_len=1 << 20, num_sms=132) == 128


def test_splits_follow_each_sequences_own_context(device):
    """A launch sized for long contexts: short sequences use one split, long ones several,
    and the idle splits leave the result untouched (they write nothing)."""
    lengths = [0, 5, 40, 70, 130]  # with 32 tokens per split: 1, 1, 2, 3, 5 of 6 splits
    out, expected = _run_case(
        device, 2, 2, 64, 16, torch.float32, lengths, num_splits=6, split_tokens=32
    )
    torch.testing.assert_close(out, expected, **attention_tolerance(torch.float32))
    assert (out[0] == 0).all()


def _valid_inputs() -> dict:
    """A valid CPU call that the bad-input tests break one argument at a time."""
    return {
        "query": torch.randn(2, 4, 64),
        "k_cache": torch.randn(8, 16, 2, 64),
        "v_cache": torch.randn(8, 16, 2, 64),
        "block_tables": torch.zeros(2, 3, dtype=torch.int32),
        "seq_lens": torch.ones(2, dtype=torch.int32),
        "scale": 0.125,
    }


BAD_INPUTS = [
    ("k_cache", lambda a: a["k_cache"].half()),
    ("query", lambda a: a["query"].to(torch.int32)),
    ("query", lambda a: torch.randn(2, 4, 128)[..., ::2]),  # last dim not contiguous
    ("query", lambda a: torch.randn(2, 3, 64)),  # 3 heads over 2 KV heads
    ("k_cache", lambda a: torch.randn(8, 16, 2, 32)),  # head_dim mismatch
    ("v_cache", lambda a: torch.randn(8, 16, 1, 64)),
    ("block_tables", lambda a: a["block_tables"].float()),
    ("block_tables", lambda a: torch.zeros(3, 3, dtype=torch.int32)),
    ("seq_lens", lambda a: torch.ones(3, dtype=torch.int32)),
    ("seq_lens", lambda a: torch.ones(2, 2, dtype=torch.int32)[:, 0]),  # not contiguous
    ("scale", lambda a: -1.0),
    ("num_splits", lambda a: 0),
    ("max_seq_len", lambda a: 10_000),
]


@pytest.mark.parametrize(("name", "make_bad"), BAD_INPUTS)
def test_rejects_bad_inputs(name, make_bad, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # CPU tensors are valid: only `name` is bad
    inputs = _valid_inputs()
    inputs[name] = make_bad(inputs)
    with pytest.raises(InvalidParameterError) as error:
        decode_attention(**inputs)
    assert error.value.parameter == name


def test_rejects_cpu_tensors_without_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(InvalidParameterError, match="CUDA"):
        decode_attention(**_valid_inputs())
