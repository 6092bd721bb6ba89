"""The scheduler->runner contract as data: a request comes whole once, then by id with only
its new blocks and input ids; finished and preempted ids name whose state the runner frees."""

from __future__ import annotations

from llmd.engine.request import FinishReason
from tests.engine.factories import make_request, make_scheduler


def _step(scheduler, plan, token_id=7):
    sampled = {c.request_id: token_id for c in plan.chunks if c.is_sampling}
    return scheduler.update_from_output(plan, sampled)


def test_a_new_request_comes_whole_then_by_id_with_only_what_is_new():
    scheduler = make_scheduler(num_blocks=64, block_size=4)
    request = make_request(num_prompt_tokens=6, max_tokens=10, temperature=0.5, seed=3)
    scheduler.add_request(request)
    plan = scheduler.schedule()
    [data] = plan.new_requests
    assert (data.request_id, data.prompt_token_ids, data.output_token_ids) == (
        request.request_id, [1, 2, 3, 4, 5, 6], [],
    )  # fmt: skip
    assert data.sampling_params is request.sampling_params and data.eos_token_ids == (0,)
    [chunk] = plan.chunks
    assert (chunk.num_computed_tokens, chunk.num_new_tokens, chunk.token_ids) == (
        0, 6, [1, 2, 3, 4, 5, 6],
    )  # fmt: skip
    assert chunk.new_block_ids == request.block_ids and chunk.num_blocks == 2
    _step(scheduler, plan)
    # Decodes at positions 6 and 7 fit the second block; position 8 opens a third.
    for position, num_new_blocks in ((6, 0), (7, 0), (8, 1)):
        plan = scheduler.schedule()
        [chunk] = plan.chunks
        assert plan.new_requests == []
        assert (chunk.num_computed_tokens, chunk.token_ids) == (position, [7])
        assert chunk.new_block_ids == request.block_ids[2 : 2 + num_new_blocks]
        assert chunk.num_blocks == len(request.block_ids) == 2 + num_new_blocks
        _step(scheduler, plan)
    assert chunk.request_id == request.request_id


def test_the_plan_after_an_end_names_it_finished_once():
    scheduler = make_scheduler(num_blocks=64, block_size=4)
    first, second = make_request(max_tokens=1), make_request(max_tokens=5)
    scheduler.add_request(first)
    scheduler.add_request(second)
    plan = scheduler.schedule()
    assert plan.finished_request_ids == []
    assert [f.request_id for f in _step(scheduler, plan)] == [first.request_id]  # max_tokens
    scheduler.finish_request(second.request_id, FinishReason.ABORT)
    plan = scheduler.schedule()  # empty: the engine hands it to `ModelRunner.free`
    assert plan.is_empty
    assert plan.finished_request_ids == [first.request_id, second.request_id]
    assert scheduler.schedule().finished_request_ids == []


def test_a_preempted_request_is_named_then_resent_whole_with_its_outputs():
    # 6 blocks of 4: two requests of 9 prompt tokens (3 blocks each) fill the pool.
    scheduler = make_scheduler(num_blocks=6, block_size=4, max_num_batched_tokens=64)
    old, new = make_request(num_prompt_tokens=9, max_tokens=8), make_request(
        num_prompt_tokens=9, max_tokens=8
    )
    scheduler.add_request(old)
    scheduler.add_request(new)
    num_new_requests = {}
    preempted_ids = []
    for _ in range(12):
        plan = scheduler.schedule()
        preempted_ids += plan.preempted_request_ids
        for data in plan.new_requests:
            num_new_requests[data.request_id] = num_new_requests.get(data.request_id, 0) + 1
            if data.request_id in preempted_ids:
                assert data.output_token_ids == [7] * len(data.output_token_ids)
                assert data.output_token_ids  # its history comes with it
        if not plan.is_empty:
            _step(scheduler, plan)
    assert preempted_ids == [new.request_id]
    assert num_new_requests == {old.request_id: 1, new.request_id: 2}


def test_after_a_failed_step_running_requests_are_sent_whole_again():
    scheduler = make_scheduler(num_blocks=64, block_size=4)
    requests = [make_request(max_tokens=5) for _ in range(2)]
    for request in requests:
        scheduler.add_request(request)
    _step(scheduler, scheduler.schedule())
    assert scheduler.schedule().new_requests == []  # (not applied: the same decodes again)
    scheduler.forget_runner_state()
    plan = scheduler.schedule()
    assert [data.request_id for data in plan.new_requests] == [r.request_id for r in requests]
    assert [chunk.new_block_ids for chunk in plan.chunks] == [r.block_ids for r in requests]
