"""The draft's block pool: its size (the target's blocks plus every request's guesses, cut
to the memory a GPU has left), blocks for a token count, all or nothing, all back on free."""

from __future__ import annotations

import pytest

from llmd.errors import InvalidParameterError
from llmd.spec.draft_block_pool import DraftBlockPool, draft_pool_size


def test_blocks_grow_to_hold_the_tokens_all_or_nothing_and_return_on_free():
    pool = DraftBlockPool(num_blocks=5, block_size=4)
    first: list[int] = []
    assert pool.grow(first, 5)  # 5 tokens: 2 blocks
    assert first == [0, 1] and pool.num_free_blocks == 3
    assert pool.grow(first, 8) and first == [0, 1]  # still fits in 2
    second: list[int] = []
    assert not pool.grow(second, 17)  # 5 blocks wanted, 3 free: none taken
    assert second == [] and pool.num_free_blocks == 3
    assert pool.grow(second, 12) and second == [2, 3, 4]
    pool.free(first)
    assert first == [] and pool.num_free_blocks == 2
    assert pool.grow(first, 1) and first == [0]  # the lowest free id again
    pool.free(first)
    pool.free(second)
    assert sorted(pool.free_block_ids) == [0, 1, 2, 3, 4]


def test_the_pool_holds_the_targets_blocks_and_the_guesses_within_the_memory_left():
    # 8 requests x (ceil(3 / 16) + 1) blocks for guesses past the target's 100.
    assert draft_pool_size(100, 8, 3, 16, bytes_per_block=1000) == 116
    assert draft_pool_size(100, 8, 20, 16, bytes_per_block=1000) == 124  # 2 + 1 each
    # On a GPU: 90% of 200,000 free bytes, less 50,000 of weights, is 130 blocks: all fit.
    assert draft_pool_size(100, 8, 3, 16, 1000, free_bytes=200_000, weight_bytes=50_000) == 116
    # 90,000 free: 31 blocks after the weights, fewer than the target's, more than 16.
    assert draft_pool_size(100, 8, 3, 16, 1000, free_bytes=90_000, weight_bytes=50_000) == 31
    with pytest.raises(InvalidParameterError) as error:
        draft_pool_size(100, 8, 3, 16, 1000, free_bytes=70_000, weight_bytes=50_000)
    assert error.value.parameter == "gpu_memory_utilization"
