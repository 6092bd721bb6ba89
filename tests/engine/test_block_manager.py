"""Block manager: allocation, freeing, prefix caching, LRU reuse and counters."""

import pytest

from llmd.engine.block_manager import BlockManager, hash_block
from llmd.engine.free_block_queue import FreeBlockQueue, KVBlock
from llmd.errors import InvalidParameterError, KVCacheIntegrityError
from tests.engine.factories import make_request


def test_free_queue_remove_from_middle_and_order():
    blocks = [KVBlock(i) for i in range(5)]
    queue = FreeBlockQueue(blocks)
    queue.remove(blocks[2])
    assert [b.block_id for b in queue] == [0, 1, 3, 4]
    assert queue.popleft().block_id == 0
    queue.append(blocks[2])
    assert [b.block_id for b in queue] == [1, 3, 4, 2]
    assert len(queue) == 4
    with pytest.raises(KVCacheIntegrityError, match="already in the free queue"):
        queue.append(blocks[3])
    with pytest.raises(KVCacheIntegrityError, match="not in the free queue"):
        queue.remove(blocks[0])


def test_allocate_and_free_counts():
    manager = BlockManager(num_blocks=8, block_size=4)
    request = make_request(num_prompt_tokens=10)
    assert manager.allocate_slots(request, 10)
    assert len(request.block_ids) == 3
    usage = manager.usage()
    assert (usage.num_used, usage.num_free, usage.num_cached) == (3, 5, 0)
    manager.free(request)
    assert request.block_ids == []
    assert manager.usage().num_used == 0
    manager.check_integrity([])


def test_allocation_failure_changes_nothing():
    manager = BlockManager(num_blocks=4, block_size=4)
    first = make_request(num_prompt_tokens=12)
    assert manager.allocate_slots(first, 12)
    second = make_request(num_prompt_tokens=8)
    assert not manager.allocate_slots(second, 8)
    assert second.block_ids == []
    assert manager.usage().num_used == 3
    manager.check_integrity([first])


def test_prefix_hit_reuses_blocks_and_leaves_one_token():
    manager = BlockManager(num_blocks=16, block_size=4)
    prompt = list(range(1, 13))  # exactly three full blocks
    first = make_request(prompt_token_ids=prompt)
    assert manager.allocate_slots(first, 12)
    first.num_computed_tokens = 12
    manager.cache_full_blocks(first)
    second = make_request(prompt_token_ids=prompt)
    hits, num_hit_tokens = manager.get_computed_blocks(second)
    # The last token must be recomputed to produce logits, so only two blocks hit.
    assert num_hit_tokens == 8
    assert [b.block_id for b in hits] == first.block_ids[:2]
    assert manager.allocate_slots(second, 4, hits)
    assert second.block_ids[:2] == first.block_ids[:2]
    assert manager.blocks[first.block_ids[0]].ref_count == 2
    manager.check_integrity([first, second])


def test_cached_block_survives_free_and_is_evicted_lru():
    manager = BlockManager(num_blocks=4, block_size=4)
    prompt = list(range(1, 10))
    first = make_request(prompt_token_ids=prompt)
    assert manager.allocate_slots(first, 9)
    first.num_computed_tokens = 9
    manager.cache_full_blocks(first)
    manager.free(first)
    usage = manager.usage()
    assert (usage.num_used, usage.num_cached, usage.num_free) == (0, 2, 2)
    again = make_request(prompt_token_ids=prompt)
    _, num_hit = manager.get_computed_blocks(again)
    assert num_hit == 8
    # A request with other tokens needs all 4 blocks: the cached ones are evicted.
    other = make_request(prompt_token_ids=[50 + i for i in range(16)])
    assert manager.allocate_slots(other, 16)
    assert manager.usage().num_cached == 0
    assert manager.get_computed_blocks(make_request(prompt_token_ids=prompt)) == ([], 0)
    manager.check_integrity([other])


def test_hit_verifies_token_ids_not_just_hash():
    manager = BlockManager(num_blocks=8, block_size=4)
    first = make_request(prompt_token_ids=[1, 2, 3, 4, 5])
    assert manager.allocate_slots(first, 5)
    first.num_computed_tokens = 5
    manager.cache_full_blocks(first)
    # Corrupt the cached entry's tokens: a hash "collision" must not be served.
    manager.blocks[first.block_ids[0]].token_ids = (9, 9, 9, 9)
    second = make_request(prompt_token_ids=[1, 2, 3, 4, 5])
    assert manager.get_computed_blocks(second) == ([], 0)


def test_chained_hash_depends_on_parent():
    assert hash_block(None, [1, 2]) != hash_block(hash_block(None, [0, 0]), [1, 2])
    assert hash_block(None, [1, 2]) == hash_block(None, [1, 2])


def test_prefix_caching_disabled():
    manager = BlockManager(num_blocks=8, block_size=4, enable_prefix_caching=False)
    first = make_request(prompt_token_ids=list(range(1, 10)))
    assert manager.allocate_slots(first, 9)
    first.num_computed_tokens = 9
    manager.cache_full_blocks(first)
    assert manager.get_computed_blocks(make_request(prompt_token_ids=list(range(1, 10)))) == (
        [],
        0,
    )


def test_reset_prefix_cache():
    manager = BlockManager(num_blocks=8, block_size=4)
    first = make_request(prompt_token_ids=list(range(1, 10)))
    assert manager.allocate_slots(first, 9)
    first.num_computed_tokens = 9
    manager.cache_full_blocks(first)
    manager.free(first)
    assert manager.reset_prefix_cache() == 2
    assert manager.usage().num_cached == 0
    manager.check_integrity([])


def test_integrity_check_catches_leak():
    manager = BlockManager(num_blocks=4, block_size=4)
    request = make_request(num_prompt_tokens=4)
    assert manager.allocate_slots(request, 4)
    with pytest.raises(KVCacheIntegrityError, match="ref count 1, held by 0"):
        manager.check_integrity([])


@pytest.mark.parametrize(
    ("num_blocks", "block_size", "parameter"),
    [(0, 4, "num_blocks"), (-1, 4, "num_blocks"), (4, 0, "block_size"), (4, 2.5, "block_size")],
)
def test_bad_sizes_are_typed_errors_naming_the_value(num_blocks, block_size, parameter):
    with pytest.raises(InvalidParameterError) as error:
        BlockManager(num_blocks=num_blocks, block_size=block_size)
    assert error.value.parameter == parameter and error.value.code == "invalid_parameter"


def test_double_free_is_a_typed_integrity_error():
    manager = BlockManager(num_blocks=4, block_size=4)
    request = make_request(num_prompt_tokens=4)
    assert manager.allocate_slots(request, 4)
    block_ids = list(request.block_ids)
    manager.free(request)
    request.block_ids = block_ids
    with pytest.raises(KVCacheIntegrityError, match="freed more often than allocated"):
        manager.free(request)


def test_free_tail_returns_blocks_past_the_tokens_kept_and_keeps_cached_ones_reusable():
    manager = BlockManager(num_blocks=8, block_size=4)
    request = make_request(num_prompt_tokens=9)
    assert manager.allocate_slots(request, 9 + 6)  # 15 tokens: 4 blocks
    request.num_computed_tokens = 8
    manager.cache_full_blocks(request)  # the first two blocks are cached
    head = request.block_ids[:3]
    assert manager.free_tail(request, 9) == 1  # 9 tokens fill 3 blocks; the fourth goes
    assert request.block_ids == head
    assert manager.usage().num_used == 3
    assert manager.free_tail(request, 9) == 0  # nothing past them: a no-op
    assert manager.free_tail(request, 4) == 2  # a cached block keeps its prefix when freed
    usage = manager.usage()
    assert (usage.num_used, usage.num_cached) == (1, 1)
    manager.check_integrity([request])
    manager.free(request)
    with pytest.raises(KVCacheIntegrityError, match="freed more often"):
        manager.free_tail(make_request_holding(manager, head[:1]), 0)


def make_request_holding(manager: BlockManager, block_ids: list[int]):
    """A request whose table names blocks it never allocated (a double free)."""
    request = make_request(num_prompt_tokens=1)
    request.block_ids = list(block_ids)
    return request
