"""The C++ row argmax against torch's: the same index on ties, NaN, -inf rows and tails."""

from __future__ import annotations

import pytest
import torch

from llmd.attention.cpu_extension import CpuExtensionUnavailableError
from llmd.runner.row_argmax import make_row_argmax, torch_row_argmax


@pytest.fixture(scope="module")
def row_argmax():
    try:
        argmax = make_row_argmax(use_cpu_ops=True)
    except CpuExtensionUnavailableError as error:
        pytest.skip(f"no C++ CPU ops here: {error}")
    assert argmax is not torch_row_argmax
    return argmax


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("vocab_size", [1, 5, 8, 13, 64, 49_157])
def test_matches_torch(row_argmax, dtype, vocab_size):
    generator = torch.Generator().manual_seed(vocab_size)
    logits = torch.randn(12, vocab_size, generator=generator).to(dtype)
    last = vocab_size - 1
    logits[1, last] = 100.0  # the maximum in the tail past the last 8 lanes
    logits[2] = 3.0  # all equal: the first index
    logits[3] = float("-inf")
    logits[4, last] = float("nan")  # NaN beats every number
    logits[5, last // 2] = logits[5, last] = float("nan")  # the first NaN
    logits[6, 0] = float("nan")
    logits[7, last // 3] = logits[7, last] = 50.0  # a tie between lanes: the first
    logits[8] = torch.randint(0, 3, (vocab_size,), generator=generator).to(dtype)  # many ties
    logits[9, last] = float("inf")
    got = row_argmax(logits)
    assert got.dtype == torch.int64
    assert got.tolist() == logits.argmax(dim=-1).tolist()


def test_strided_rows_and_other_dtypes_match_torch(row_argmax):
    logits = torch.randn(6, 40, 3)
    assert row_argmax(logits[:, :, 1]).tolist() == logits[:, :, 1].argmax(-1).tolist()
    assert row_argmax(logits[:, :, 0].half()).tolist() == logits[:, :, 0].argmax(-1).tolist()
    assert row_argmax(torch.empty(0, 40)).tolist() == []


def test_the_op_refuses_what_it_cannot_read():
    from llmd.attention.cpu_extension import load_cpu_ops

    try:
        op = load_cpu_ops().row_argmax
    except CpuExtensionUnavailableError as error:
        pytest.skip(f"no C++ CPU ops here: {error}")
    with pytest.raises(RuntimeError, match="one id per row"):
        op(torch.empty(3, dtype=torch.int32), torch.randn(3, 8))
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        op(torch.empty(3, dtype=torch.int64), torch.randn(3, 8).half())
