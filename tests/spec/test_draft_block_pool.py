"""The draft's block pool: blocks for a token count, all or nothing, and all back on free."""

from __future__ import annotations

from llmd.spec.draft_block_pool import DraftBlockPool


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
