"""The grammar mask on the logits against a bit-by-bit Python reference."""

from __future__ import annotations

import numpy as np
import torch

from llmd.engine.scheduler_output import GrammarBitmask
from llmd.runner.token_bitmask import allowed_tokens_for, apply_allowed_tokens, unpack_bitmask


def _reference_allowed(bitmask: np.ndarray, vocab_size: int) -> np.ndarray:
    allowed = np.zeros((bitmask.shape[0], vocab_size), dtype=bool)
    for row in range(bitmask.shape[0]):
        for token in range(min(vocab_size, 32 * bitmask.shape[1])):
            word = int(bitmask[row, token // 32]) & 0xFFFFFFFF
            allowed[row, token] = bool((word >> (token % 32)) & 1)
    return allowed


def test_unpack_matches_the_reference_bit_by_bit_including_sign_bits():
    rng = np.random.default_rng(0)
    bitmask = rng.integers(-(2**31), 2**31, size=(5, 4), dtype=np.int64).astype(np.int32)
    bitmask[0, :] = -1  # every bit, sign bit included
    bitmask[1, :] = 0
    for vocab_size in (100, 128, 140):  # narrower, equal and wider than 32 * words
        got = unpack_bitmask(torch.from_numpy(bitmask), vocab_size).numpy()
        np.testing.assert_array_equal(got, _reference_allowed(bitmask, vocab_size))


def test_only_the_constrained_rows_lose_their_disallowed_tokens():
    vocab_size = 70
    logits = torch.randn(4, vocab_size)
    bitmask = np.zeros((2, 3), dtype=np.int32)
    bitmask[0, 0] = 0b1010  # tokens 1 and 3
    bitmask[1, 2] = 1 << 5  # token 69
    grammar = GrammarBitmask(["b", "d"], bitmask)
    allowed = allowed_tokens_for(grammar, {"a": 0, "b": 1, "c": 2, "d": 3}, torch.device("cpu"))
    masked = apply_allowed_tokens(logits, allowed)
    torch.testing.assert_close(masked[[0, 2]], logits[[0, 2]])
    assert torch.isfinite(masked[1]).nonzero().flatten().tolist() == [1, 3]
    assert torch.isfinite(masked[3]).nonzero().flatten().tolist() == [69]
    torch.testing.assert_close(masked[1, [1, 3]], logits[1, [1, 3]])
