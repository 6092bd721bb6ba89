"""The block manager's KV-cache events: what routers learn of the prefix cache."""

from __future__ import annotations

from llmd.engine.block_manager import BlockManager
from llmd.engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventLog
from tests.engine.factories import make_request


def computed(manager: BlockManager, prompt: list[int]):
    """A request whose whole prompt was computed and cached."""
    request = make_request(prompt_token_ids=prompt)
    hits, num_hit_tokens = manager.get_computed_blocks(request)
    assert manager.allocate_slots(request, len(prompt) - num_hit_tokens, hits)
    request.num_computed_tokens = len(prompt)
    manager.cache_full_blocks(request)
    return request


def test_stores_name_each_new_run_of_full_blocks_once_with_its_tokens_and_parent():
    manager = BlockManager(num_blocks=16, block_size=4)
    manager.kv_events = log = KVEventLog()
    prompt = list(range(1, 11))  # two full blocks and a partial one
    first = computed(manager, prompt)
    assert log.drain() == [BlockStored(first.block_hashes[:2], None, prompt[:8], 4)]
    # Same two blocks (a hit: nothing new), then one more full block after them.
    second = computed(manager, prompt[:8] + [50, 51, 52, 53, 54])
    assert log.drain() == [
        BlockStored([second.block_hashes[2]], second.block_hashes[1], [50, 51, 52, 53], 4)
    ]
    assert second.block_hashes[:2] == first.block_hashes[:2]
    assert log.drain() == []  # drained


def test_evictions_are_removals_and_a_reset_is_one_clear():
    manager = BlockManager(num_blocks=4, block_size=4)
    manager.kv_events = log = KVEventLog()
    first = computed(manager, list(range(1, 9)))  # two cached blocks
    manager.free(first)
    log.drain()
    other = make_request(prompt_token_ids=list(range(100, 112)))
    # Three blocks: the two never cached, then the cached tail (freed first, evicted first).
    assert manager.allocate_slots(other, 12)
    assert log.drain() == [BlockRemoved([first.block_hashes[1]])]
    other.num_computed_tokens = 12
    manager.cache_full_blocks(other)
    manager.free(other)
    log.drain()
    assert manager.reset_prefix_cache() == 4  # first's head block and other's three
    assert log.drain() == [AllBlocksCleared()]  # not three removals
    assert manager.reset_prefix_cache() == 0 and log.drain() == []  # nothing to clear


def test_no_log_no_events_and_no_cost():
    manager = BlockManager(num_blocks=8, block_size=4)
    assert manager.kv_events is None
    computed(manager, list(range(1, 9)))  # nothing to record into: must not fail
