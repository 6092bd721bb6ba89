"""The engine's own figures: decode/prefill token split, prefix hit rate, pool usage."""

from __future__ import annotations

import pytest

from llmd.engine.block_manager import BlockManager, BlockUsage
from tests.engine.factories import assert_idle_and_clean, make_request, make_scheduler, run_step


def _drain(scheduler, max_steps=1000):
    outputs = []
    while scheduler.has_unfinished_requests and len(outputs) < max_steps:
        outputs.append(run_step(scheduler)[0])
    return outputs


def test_one_token_prompt_is_prefill_not_decode():
    scheduler = make_scheduler()
    scheduler.add_request(make_request(num_prompt_tokens=1, max_tokens=3))
    outputs = _drain(scheduler)
    assert (outputs[0].num_prefill_tokens, outputs[0].num_decode_tokens) == (1, 0)
    assert [o.num_decode_tokens for o in outputs[1:]] == [1, 1]
    assert sum(o.num_prefill_tokens for o in outputs) == 1
    assert_idle_and_clean(scheduler)


def test_last_one_token_prompt_chunk_is_prefill():
    scheduler = make_scheduler(max_num_batched_tokens=8)
    scheduler.add_request(make_request(num_prompt_tokens=9, max_tokens=2))
    outputs = _drain(scheduler)
    assert [(o.num_prefill_tokens, o.num_decode_tokens) for o in outputs] == [
        (8, 0),
        (1, 0),
        (0, 1),
    ]


def test_prefix_hit_leaving_one_token_is_prefill():
    scheduler = make_scheduler(block_size=4)
    prompt = list(range(1, 10))  # 9 tokens: two full blocks can hit, one token is left
    scheduler.add_request(make_request(prompt_token_ids=prompt, max_tokens=1))
    _drain(scheduler)
    scheduler.add_request(make_request(prompt_token_ids=prompt, max_tokens=1))
    output, _ = run_step(scheduler)
    assert (output.num_prefill_tokens, output.num_decode_tokens) == (1, 0)


def test_prefix_hit_rate_counts_each_request_once_despite_preemption():
    # Eight blocks of four tokens: two requests growing to 20 tokens each cannot both fit,
    # so one is preempted and re-admitted, and its re-admission hits its own blocks.
    scheduler = make_scheduler(num_blocks=8, block_size=4, max_model_len=64)
    first = make_request(num_prompt_tokens=8, max_tokens=12)
    second = make_request(prompt_token_ids=[50 + i for i in range(8)], max_tokens=12)
    scheduler.add_request(first)
    scheduler.add_request(second)
    _drain(scheduler)
    assert first.num_preemptions + second.num_preemptions >= 1
    usage = scheduler.block_manager.usage()
    assert usage.num_prefix_query_tokens == 16
    assert usage.num_prefix_hit_tokens == 0
    assert_idle_and_clean(scheduler)


def test_block_usage_rejects_counts_that_do_not_add_up():
    with pytest.raises(RuntimeError, match="accounting"):
        BlockUsage(
            num_total=4,
            num_used=2,
            num_cached=1,
            num_free=2,
            num_prefix_query_tokens=0,
            num_prefix_hit_tokens=0,
        )


def test_usage_detects_a_block_lost_from_the_pool():
    manager = BlockManager(num_blocks=8, block_size=4)
    request = make_request(num_prompt_tokens=6)
    assert manager.allocate_slots(request, 6)
    assert manager.usage().num_used == 2
    manager.free_queue.popleft()  # a block leaves the free queue without an owner
    with pytest.raises(RuntimeError, match="accounting"):
        manager.usage()
    with pytest.raises(RuntimeError):
        manager.check_integrity([request])
