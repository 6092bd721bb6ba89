"""Scheduler: token budget, chunked prefill, admission, preemption and the leak check."""

import random

import pytest

from llmd.engine.request import FinishReason, RequestStatus
from llmd.errors import InvalidParameterError, RequestRejectedError, SchedulerStallError
from tests.engine.factories import (
    EOS,
    assert_idle_and_clean,
    make_request,
    make_scheduler,
    run_step,
)


def drain(scheduler, max_steps=10_000):
    """Run steps until every request has finished; returns all finished requests."""
    finished = []
    for _ in range(max_steps):
        if not scheduler.has_unfinished_requests:
            return finished
        _, done = run_step(scheduler)
        finished += done
    raise AssertionError("scheduler did not drain")


def test_single_request_prefill_then_decodes():
    scheduler = make_scheduler()
    request = make_request(num_prompt_tokens=10, max_tokens=3)
    scheduler.add_request(request)
    output, _ = run_step(scheduler)
    assert output.num_prefill_tokens == 10 and output.num_decode_tokens == 0
    assert request.num_output_tokens == 1
    output, _ = run_step(scheduler)
    assert output.num_decode_tokens == 1 and output.chunks[0].is_decode
    _, finished = run_step(scheduler)
    assert finished == [request]
    assert request.finish_reason is FinishReason.LENGTH
    assert request.output_token_ids == [5, 5, 5]
    assert_idle_and_clean(scheduler)


def test_token_budget_chunks_long_prompt():
    scheduler = make_scheduler(max_num_batched_tokens=8)
    request = make_request(num_prompt_tokens=20, max_tokens=1)
    scheduler.add_request(request)
    sizes = []
    while scheduler.has_unfinished_requests:
        output, _ = run_step(scheduler)
        assert output.num_batched_tokens <= 8
        sizes.append(output.num_prefill_tokens)
    assert sizes == [8, 8, 4]
    assert request.num_prefill_chunks == 3
    assert_idle_and_clean(scheduler)


def test_decodes_scheduled_before_new_prefills_and_max_num_seqs():
    scheduler = make_scheduler(max_num_seqs=2, max_num_batched_tokens=16)
    first, second, third = (make_request(num_prompt_tokens=6, max_tokens=5) for _ in range(3))
    for request in (first, second, third):
        scheduler.add_request(request)
    output, _ = run_step(scheduler)
    assert [c.request for c in output.chunks] == [first, second]
    output, _ = run_step(scheduler)
    assert all(c.is_decode for c in output.chunks)
    assert len(scheduler.running) == 2
    drain(scheduler)
    assert_idle_and_clean(scheduler)


def test_no_chunking_waits_for_whole_prompt():
    scheduler = make_scheduler(
        max_num_batched_tokens=128, enable_chunked_prefill=False, max_model_len=128
    )
    long_request = make_request(num_prompt_tokens=100, max_tokens=2)
    short_request = make_request(num_prompt_tokens=40, max_tokens=2)
    scheduler.add_request(short_request)
    scheduler.add_request(long_request)
    output, _ = run_step(scheduler)
    # 40 tokens fit; the next prompt (100) does not fit the remaining 88 and is not chunked.
    assert [c.num_new_tokens for c in output.chunks] == [40]
    drain(scheduler)
    assert_idle_and_clean(scheduler)


def test_unservable_requests_rejected_at_once():
    scheduler = make_scheduler(num_blocks=8, block_size=4, max_model_len=64)
    with pytest.raises(RequestRejectedError) as too_long:
        scheduler.add_request(make_request(num_prompt_tokens=64))
    assert too_long.value.parameter == "prompt"
    with pytest.raises(RequestRejectedError) as too_big:
        scheduler.add_request(make_request(num_prompt_tokens=20, max_tokens=40))
    assert too_big.value.parameter == "max_tokens"
    with pytest.raises(InvalidParameterError):
        scheduler.add_request(make_request(prompt_token_ids=[]))
    assert not scheduler.has_unfinished_requests


def test_duplicate_request_id_rejected():
    scheduler = make_scheduler()
    scheduler.add_request(make_request(request_id="a"))
    with pytest.raises(InvalidParameterError):
        scheduler.add_request(make_request(request_id="a"))


def test_stop_on_eos_and_stop_token_and_min_tokens():
    scheduler = make_scheduler()
    eos_request = make_request(num_prompt_tokens=4, max_tokens=10, ignore_eos=False)
    scheduler.add_request(eos_request)
    output = scheduler.schedule()
    finished = scheduler.update_from_output(output, {eos_request.request_id: EOS})
    assert finished == [eos_request] and eos_request.finish_reason is FinishReason.STOP

    min_request = make_request(num_prompt_tokens=4, max_tokens=10, ignore_eos=False, min_tokens=2)
    scheduler.add_request(min_request)
    output = scheduler.schedule()
    assert scheduler.update_from_output(output, {min_request.request_id: EOS}) == []
    output = scheduler.schedule()
    assert scheduler.update_from_output(output, {min_request.request_id: EOS}) == [min_request]

    stop_request = make_request(num_prompt_tokens=4, max_tokens=10, stop_token_ids=[7])
    scheduler.add_request(stop_request)
    output = scheduler.schedule()
    scheduler.update_from_output(output, {stop_request.request_id: 7})
    assert stop_request.finish_reason is FinishReason.STOP and stop_request.stop_reason == 7
    assert_idle_and_clean(scheduler)


def test_request_exactly_filling_max_model_len_ends_with_length():
    scheduler = make_scheduler(max_model_len=12)
    request = make_request(num_prompt_tokens=10, max_tokens=2)
    scheduler.add_request(request)
    drain(scheduler)
    assert request.num_tokens == 12 and request.finish_reason is FinishReason.LENGTH
    assert_idle_and_clean(scheduler)


def test_max_tokens_beyond_max_model_len_is_rejected_naming_both_numbers():
    """Regression: max_tokens far beyond the context was silently capped at max_model_len."""
    scheduler = make_scheduler(max_model_len=12)
    with pytest.raises(RequestRejectedError) as error:
        scheduler.add_request(make_request(num_prompt_tokens=10, max_tokens=100))
    assert error.value.code == "request_too_large" and error.value.parameter == "max_tokens"
    message = str(error.value)
    assert "max_tokens (100)" in message and "110 tokens" in message
    assert "max_model_len is 12" in message
    with pytest.raises(RequestRejectedError):
        scheduler.add_request(make_request(num_prompt_tokens=10, max_tokens=3))
    assert not scheduler.has_unfinished_requests


def test_preemption_newest_first_and_resume():
    # 8 blocks of 4 tokens; two requests of 12 prompt tokens grow until KV runs out.
    scheduler = make_scheduler(num_blocks=8, block_size=4, max_model_len=32)
    old = make_request(num_prompt_tokens=12, max_tokens=12)
    new = make_request(num_prompt_tokens=12, max_tokens=12)
    scheduler.add_request(old)
    scheduler.add_request(new)
    preempted = []
    while scheduler.has_unfinished_requests:
        output, _ = run_step(scheduler)
        preempted += output.preempted_request_ids
        manager = scheduler.block_manager
        usage = manager.usage()
        assert usage.num_used + usage.num_cached + usage.num_free == usage.num_total
    assert preempted and preempted[0] == new.request_id
    assert new.num_preemptions >= 1 and old.num_preemptions == 0
    assert old.output_token_ids == [5] * 12 and new.output_token_ids == [5] * 12
    assert_idle_and_clean(scheduler)


def test_preempted_request_recomputes_prompt_and_outputs():
    scheduler = make_scheduler(num_blocks=8, block_size=4, max_model_len=32)
    old = make_request(num_prompt_tokens=12, max_tokens=12)
    new = make_request(num_prompt_tokens=12, max_tokens=12)
    scheduler.add_request(old)
    scheduler.add_request(new)
    resumed_sizes = []
    while scheduler.has_unfinished_requests:
        was_preempted = new.status is RequestStatus.PREEMPTED
        output, _ = run_step(scheduler)
        for chunk in output.chunks:
            if chunk.request is new and was_preempted:
                resumed_sizes.append(chunk.num_new_tokens + new.num_cached_tokens)
    # On resumption it catches up on prompt plus the outputs generated before preemption.
    assert resumed_sizes and resumed_sizes[0] > 12


def test_priority_policy_admits_the_highest_priority_first():
    scheduler = make_scheduler(policy="priority", max_num_seqs=1)
    low = make_request(num_prompt_tokens=4, max_tokens=2, priority=5)
    high = make_request(num_prompt_tokens=4, max_tokens=2, priority=-1)
    scheduler.add_request(low)
    scheduler.add_request(high)
    output, _ = run_step(scheduler)
    assert [c.request for c in output.chunks] == [high]
    assert [r.request_id for r in drain(scheduler)] == [high.request_id, low.request_id]
    assert_idle_and_clean(scheduler)


def _priority_request(index: int, name: str, priority: int, arrival: float):
    """A 4-token prompt of its own (no prefix hits) growing to 24 tokens = 6 blocks of 4."""
    prompt = [10 * index + k for k in range(1, 5)]
    return make_request(
        prompt_token_ids=prompt, max_tokens=20, priority=priority,
        request_id=name, arrival_time=arrival,
    )  # fmt: skip


def test_priority_policy_preempts_the_lowest_priority_and_the_newest_of_a_tie():
    """Preemption under the priority policy: the largest `priority` value goes first, and of
    equal priorities the latest arrival; a higher-priority request is never a victim."""
    scheduler = make_scheduler(num_blocks=10, block_size=4, max_model_len=32, policy="priority")
    spec = [("p0", 0, 1.0), ("p2-old", 2, 2.0), ("p2-new", 2, 3.0), ("p1", 1, 4.0)]
    for index, (name, priority, arrival) in enumerate(spec):
        scheduler.add_request(_priority_request(index, name, priority, arrival))
    preemptions: list[list[str]] = []
    finished = []
    step = 0
    while scheduler.has_unfinished_requests:
        priority_of_running = {r.request_id: r.priority for r in scheduler.running}
        output, done = run_step(scheduler)
        step += 1
        if step == 1:  # admitted after the others, so it runs last unless the list is sorted
            scheduler.add_request(_priority_request(4, "p1-late", 1, 5.0))
        if output.preempted_request_ids:
            preemptions.append(output.preempted_request_ids)
            kept = set(priority_of_running) - set(output.preempted_request_ids)
            for victim in output.preempted_request_ids:
                kept_priorities = [priority_of_running[r] for r in kept]
                assert all(priority_of_running[victim] >= p for p in kept_priorities), (
                    step, victim, priority_of_running,
                )  # fmt: skip
        finished += done
        usage = scheduler.block_manager.usage()
        assert usage.num_used + usage.num_cached + usage.num_free == usage.num_total
    # By hand: after step 5 the five requests hold all 10 blocks (2 each). At token 9 p0
    # needs a third: p2-new goes (priority 2, newest); p1 takes a freed block, p1-late's
    # token 8 still fits, and p2-old, the lowest left, cannot grow and preempts itself. At
    # token 13 p1-late (a tie with p1, newer) goes; at 21 p1, leaving p0. After p0 and p1
    # finish, p1-late evicts p2-new and p2-old; after p1-late, p2-old evicts p2-new.
    assert preemptions == [
        ["p2-new", "p2-old"], ["p1-late"], ["p1"], ["p2-new"], ["p2-old"], ["p2-new"],
    ]  # fmt: skip
    assert [r.request_id for r in finished] == ["p0", "p1", "p1-late", "p2-old", "p2-new"]
    assert [r.num_preemptions for r in finished] == [0, 1, 1, 2, 3]
    assert scheduler.num_preemptions == 7
    for request in finished:  # recomputed after each preemption, nothing lost
        assert request.output_token_ids == [5] * 20
        assert request.finish_reason is FinishReason.LENGTH
    assert_idle_and_clean(scheduler)


def test_abort_frees_blocks_immediately_in_every_state():
    scheduler = make_scheduler(max_num_seqs=1)
    running = make_request(num_prompt_tokens=10, max_tokens=10)
    waiting = make_request(num_prompt_tokens=10, max_tokens=10)
    scheduler.add_request(running)
    scheduler.add_request(waiting)
    run_step(scheduler)
    assert scheduler.finish_request(running.request_id, FinishReason.ABORT) is running
    assert scheduler.finish_request(waiting.request_id, FinishReason.ABORT) is waiting
    assert scheduler.finish_request("missing", FinishReason.ABORT) is None
    assert running.finish_reason is FinishReason.ABORT
    assert_idle_and_clean(scheduler)


def test_prefix_hit_skips_computation():
    scheduler = make_scheduler(block_size=4)
    prompt = list(range(1, 18))
    first = make_request(prompt_token_ids=prompt, max_tokens=1)
    scheduler.add_request(first)
    drain(scheduler)
    second = make_request(prompt_token_ids=prompt, max_tokens=1)
    scheduler.add_request(second)
    output, _ = run_step(scheduler)
    assert second.num_cached_tokens == 16
    assert output.num_prefill_tokens == 1 or output.num_decode_tokens == 1
    usage = scheduler.block_manager.usage()
    assert usage.num_prefix_hit_tokens == 16
    assert_idle_and_clean(scheduler)


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_lifecycles_leak_free(policy, seed):
    """Thousands of random lifecycles with aborts, tiny KV, shared prefixes: no leaks."""
    rng = random.Random(seed)
    scheduler = make_scheduler(
        num_blocks=40,
        block_size=4,
        max_num_seqs=rng.choice([4, 8, 16]),
        max_num_batched_tokens=rng.choice([8, 16, 48]),
        max_model_len=96,
        enable_chunked_prefill=True,
        policy=policy,
    )
    prefixes = [[rng.randrange(1, 50) for _ in range(rng.randrange(4, 20))] for _ in range(4)]
    num_added = 0
    for step in range(1500):
        for _ in range(rng.choice([0, 0, 1, 2])):
            suffix = [rng.randrange(1, 50) for _ in range(rng.randrange(1, 30))]
            prompt = rng.choice(prefixes) + suffix
            request = make_request(
                prompt_token_ids=prompt[:90],
                max_tokens=rng.randrange(1, 40),
                priority=rng.randrange(3),
                ignore_eos=rng.random() < 0.5,
            )
            try:
                scheduler.add_request(request)
                num_added += 1
            except RequestRejectedError:
                pass
        if scheduler.requests and rng.random() < 0.1:
            victim = rng.choice(list(scheduler.requests))
            scheduler.finish_request(victim, FinishReason.ABORT)
        output = scheduler.schedule()
        assert output.num_batched_tokens <= scheduler.config.max_num_batched_tokens
        assert len(output.chunks) <= scheduler.config.max_num_seqs
        sampled = {
            c.request.request_id: rng.choice([EOS, 3, 4, 5, 6])
            for c in output.chunks
            if c.is_sampling
        }
        scheduler.update_from_output(output, sampled)
        usage = scheduler.block_manager.usage()
        assert usage.num_used + usage.num_cached + usage.num_free == usage.num_total
        if step % 50 == 0:
            scheduler.check_integrity()
    drain(scheduler)
    assert num_added > 500
    assert_idle_and_clean(scheduler)


def test_request_filling_the_whole_pool_is_admitted_when_idle():
    """Regression: admission kept 1% headroom even when idle, so a request that fit the whole
    KV pool passed `check_servable` but was never admitted, and the queue behind it hung."""
    scheduler = make_scheduler(
        num_blocks=128, block_size=4, max_num_batched_tokens=1024, max_model_len=512
    )
    big = make_request(num_prompt_tokens=511, max_tokens=1)
    small = make_request(num_prompt_tokens=4, max_tokens=2)
    scheduler.add_request(big)
    scheduler.add_request(small)
    finished = drain(scheduler)
    assert [r.request_id for r in finished] == [big.request_id, small.request_id]
    assert big.num_tokens == 512 and big.finish_reason is FinishReason.LENGTH
    assert_idle_and_clean(scheduler)


def test_headroom_still_kept_while_others_run():
    """With a request running, admission leaves headroom so the runner can grow first."""
    scheduler = make_scheduler(
        num_blocks=100, block_size=4, max_num_batched_tokens=1024, max_model_len=512
    )
    runner = make_request(num_prompt_tokens=4, max_tokens=8)
    scheduler.add_request(runner)
    run_step(scheduler)  # runner holds 1 block (prompt) and is decoding
    # 99 blocks are free; the headroom is 1 block, so a 99-block prompt must wait.
    waiting = make_request(num_prompt_tokens=99 * 4 - 1, max_tokens=1)
    scheduler.add_request(waiting)
    output, _ = run_step(scheduler)
    assert [c.request for c in output.chunks] == [runner]
    assert waiting.status is RequestStatus.WAITING
    drain(scheduler)
    assert waiting.finish_reason is FinishReason.LENGTH
    assert_idle_and_clean(scheduler)


@pytest.mark.parametrize("seed", range(6))
def test_every_accepted_request_finishes_when_engine_idle(seed):
    """Invariant: whatever add_request accepts is eventually admitted and finishes."""
    rng = random.Random(seed)
    num_accepted = num_rejected = 0
    for _ in range(40):
        block_size = rng.choice([1, 2, 4, 8, 16])
        num_blocks = rng.randrange(1, 300)
        max_model_len = rng.randrange(2, 600)
        chunked = rng.random() < 0.7
        scheduler = make_scheduler(
            num_blocks=num_blocks,
            block_size=block_size,
            max_num_seqs=rng.choice([1, 2, 8]),
            max_num_batched_tokens=rng.choice([1, 7, 64, 4096]) if chunked else max_model_len,
            max_model_len=max_model_len,
            enable_chunked_prefill=chunked,
            enable_prefix_caching=rng.random() < 0.5,
        )
        accepted = []
        shared = [rng.randrange(1, 50) for _ in range(rng.randrange(1, 400))]
        for _ in range(rng.randrange(1, 6)):
            capacity = num_blocks * block_size
            limit = min(capacity, max_model_len)
            if rng.random() < 0.5:  # near the edge, where admission and servability may differ
                num_prompt = max(1, limit - rng.randrange(0, 3 * block_size))
            else:
                num_prompt = rng.randrange(1, limit + 8)
            prompt = (shared + [rng.randrange(1, 50) for _ in range(num_prompt)])[:num_prompt]
            request = make_request(
                prompt_token_ids=prompt,
                max_tokens=rng.choice([1, 2, rng.randrange(1, 2 * max_model_len)]),
            )
            try:
                scheduler.add_request(request)
            except RequestRejectedError:
                num_rejected += 1
                continue
            accepted.append(request)
        finished = drain(scheduler, max_steps=20_000)
        assert sorted(r.request_id for r in finished) == sorted(r.request_id for r in accepted)
        num_accepted += len(accepted)
        assert_idle_and_clean(scheduler)
    assert num_accepted > 50 and num_rejected > 5


def test_idle_scheduler_that_cannot_admit_raises_instead_of_planning_nothing():
    """No progress with nothing running is a bug: a typed error, never an endless empty plan."""
    scheduler = make_scheduler(num_blocks=8, block_size=4, max_model_len=32)
    leaked = make_request(num_prompt_tokens=20)
    assert scheduler.block_manager.allocate_slots(leaked, 20)  # 5 blocks held by no request
    request = make_request(num_prompt_tokens=20, max_tokens=1)
    scheduler.add_request(request)
    with pytest.raises(SchedulerStallError) as stalled:
        scheduler.schedule()
    assert stalled.value.request_id == request.request_id
    assert "cannot be admitted" in str(stalled.value)
