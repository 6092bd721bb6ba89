"""Wait reasons: every second a request waits is charged to exactly one reason, step by step.

Each scheduler runs on a hand-driven clock (a step at t = 1, 2, 3, ...), so every figure
below is computed by hand from the plan, and the sums are checked against the request's
own timestamps (queue time = first scheduled - arrival), an independent count.
"""

import pytest

from llmd.engine.request import FinishReason
from llmd.outputs import RequestMetrics
from llmd.wait_breakdown import (
    KV_BLOCKS,
    MAX_NUM_SEQS,
    PREEMPTED,
    QUEUE,
    TOKEN_BUDGET,
    WAIT_REASONS,
    WaitBreakdown,
)
from tests.engine.factories import assert_idle_and_clean, make_request, make_scheduler


def distinct(num_prompt_tokens: int, max_tokens: int, arrival_time: float = 0.0, **kwargs):
    """A request whose prompt shares no prefix with any other request's here."""
    global _next_token_id
    prompt = list(range(_next_token_id, _next_token_id + num_prompt_tokens))
    _next_token_id += num_prompt_tokens
    return make_request(
        prompt_token_ids=prompt, max_tokens=max_tokens, arrival_time=arrival_time, **kwargs
    )


_next_token_id = 1


def step_at(scheduler, now: float, next_token: int = 5):
    """Plan a step at `now`, 'sample' `next_token` for each sampling chunk, apply it."""
    output = scheduler.schedule(now=now)
    sampled = {c.request.request_id: next_token for c in output.chunks if c.is_sampling}
    scheduler.update_from_output(output, sampled)
    return output


def add_at(scheduler, request, now: float = 0.0) -> None:
    scheduler.add_request(request, now=now)


def only(breakdown: WaitBreakdown, **expected: float) -> None:
    """Every reason is as expected (the ones not named are exactly zero)."""
    for reason in WAIT_REASONS:
        assert breakdown.wait_s[reason] == pytest.approx(expected.get(reason, 0.0)), reason


def assert_sums_match_the_timestamps(request) -> None:
    """The reasons add up to the request's queue time (+ waits after preemptions)."""
    metrics = RequestMetrics.from_request(request)
    waits = metrics.waits
    assert waits.queue_wait_s == pytest.approx(metrics.queue_time)
    assert waits.total_wait_s == pytest.approx(metrics.queue_time + waits.wait_s[PREEMPTED])


def test_a_request_admitted_at_its_first_step_waited_in_the_queue_only():
    scheduler = make_scheduler()
    request = distinct(6, 2, 0.0)
    add_at(scheduler, request, now=0.25)  # tokenized for a quarter second
    step_at(scheduler, 1.0)
    step_at(scheduler, 2.0)
    waits = RequestMetrics.from_request(request).waits
    only(waits, queue=1.0)
    assert waits.num_wait_steps == {**dict.fromkeys(WAIT_REASONS, 0), QUEUE: 1}
    assert waits.main_reason == QUEUE and waits.token_budget_taken_by is None
    assert_sums_match_the_timestamps(request)
    assert_idle_and_clean(scheduler)


def test_kv_blocks_holds_the_head_and_queue_the_ones_behind_it():
    # 4 blocks of 4 tokens: A (10-token prompt, 4 outputs) holds 3 blocks, then all 4.
    scheduler = make_scheduler(num_blocks=4, block_size=4, max_model_len=16)
    first = distinct(10, 4, 0.0)
    blocked = distinct(6, 2, 0.0)  # 2 blocks
    behind = distinct(2, 2, 0.0)  # would fit
    for request in (first, blocked, behind):
        add_at(scheduler, request)
    for now in (1.0, 2.0, 3.0, 4.0):  # A: prefill + 3 decodes, its 4th token ends it
        output = step_at(scheduler, now)
        assert [c.request for c in output.chunks] == [first]
    output = step_at(scheduler, 5.0)
    assert {c.request for c in output.chunks} == {blocked, behind}
    while scheduler.has_unfinished_requests:
        step_at(scheduler, 6.0)
    blocked_waits = RequestMetrics.from_request(blocked).waits
    only(blocked_waits, queue=1.0, kv_blocks=4.0)
    assert blocked_waits.num_wait_steps[KV_BLOCKS] == 4
    assert blocked_waits.main_reason == KV_BLOCKS
    only(RequestMetrics.from_request(behind).waits, queue=5.0)  # head-of-line blocking
    only(RequestMetrics.from_request(first).waits, queue=1.0)
    for request in (first, blocked, behind):
        assert_sums_match_the_timestamps(request)
    assert_idle_and_clean(scheduler)


def test_max_num_seqs_holds_every_waiting_request():
    scheduler = make_scheduler(max_num_seqs=1)
    first = distinct(4, 3, 0.0)
    second = distinct(4, 1, 0.0)
    third = distinct(4, 1, 0.5)
    add_at(scheduler, first)
    add_at(scheduler, second)
    add_at(scheduler, third, now=0.5)
    for now in (1.0, 2.0, 3.0):  # first runs alone, finishing at its third token
        step_at(scheduler, now)
    step_at(scheduler, 4.0)  # second: one token, done
    step_at(scheduler, 5.0)  # third
    only(RequestMetrics.from_request(second).waits, queue=1.0, max_num_seqs=3.0)
    third_waits = RequestMetrics.from_request(third).waits
    only(third_waits, queue=0.5, max_num_seqs=4.0)  # the step in flight at arrival: queue
    assert third_waits.num_wait_steps[MAX_NUM_SEQS] == 4
    for request in (first, second, third):
        assert_sums_match_the_timestamps(request)
    assert_idle_and_clean(scheduler)


def test_token_budget_names_the_prefill_that_took_it_and_the_chunks_are_listed():
    scheduler = make_scheduler(max_num_batched_tokens=8)
    long_prompt = distinct(20, 2, 0.0)
    short = distinct(6, 1, 0.0)
    add_at(scheduler, long_prompt)
    add_at(scheduler, short)
    sizes = [step_at(scheduler, now).num_prefill_tokens for now in (1.0, 2.0, 3.0, 4.0)]
    assert sizes == [8, 8, 8, 2]  # 8, 8, then 4 + the short one's first 4; then its last 2
    waits = RequestMetrics.from_request(short).waits
    only(waits, queue=1.0, token_budget=2.0)
    assert waits.num_wait_steps[TOKEN_BUDGET] == 2
    assert waits.token_budget_taken_by == long_prompt.request_id
    assert waits.num_prefill_chunks == 2 and waits.prefill_chunk_sizes == (4, 2)
    assert waits.num_prefill_tokens == 6
    long_waits = RequestMetrics.from_request(long_prompt).waits
    assert long_waits.prefill_chunk_sizes == (8, 8, 4) and long_waits.num_prefill_chunks == 3
    only(long_waits, queue=1.0)
    assert_sums_match_the_timestamps(short)
    while scheduler.has_unfinished_requests:
        step_at(scheduler, 5.0)
    assert_idle_and_clean(scheduler)


def test_a_whole_prompt_over_the_budget_without_chunking_is_the_heads_token_budget():
    scheduler = make_scheduler(
        max_num_batched_tokens=16, max_model_len=16, enable_chunked_prefill=False
    )
    first = distinct(10, 3, 0.0)
    big = distinct(12, 1, 0.0)
    add_at(scheduler, first)
    add_at(scheduler, big)
    output = step_at(scheduler, 1.0)  # 10 prompt tokens leave 6: the 12 must wait whole
    assert [c.request for c in output.chunks] == [first]
    assert scheduler.wait_tracker.current_reason(big) == TOKEN_BUDGET
    output = step_at(scheduler, 2.0)  # a decode leaves 15
    assert {c.request for c in output.chunks} == {first, big}
    waits = RequestMetrics.from_request(big).waits
    only(waits, queue=1.0, token_budget=1.0)
    assert waits.token_budget_taken_by == first.request_id
    assert_sums_match_the_timestamps(big)
    while scheduler.has_unfinished_requests:
        step_at(scheduler, 3.0)
    assert_idle_and_clean(scheduler)


def test_a_preempted_request_waits_as_preempted_until_recomputed():
    # 4 blocks of 4 tokens; two 8-token prompts (2 blocks each) both grow into a 3rd block.
    scheduler = make_scheduler(num_blocks=4, block_size=4, max_model_len=16)
    older = distinct(8, 4, 0.0)
    newer = distinct(8, 4, 0.0)
    add_at(scheduler, older)
    add_at(scheduler, newer)
    step_at(scheduler, 1.0)  # both prefill: 2 blocks each, all 4 used
    output = step_at(scheduler, 2.0)  # older needs a 3rd block: newer is preempted
    assert output.preempted_request_ids == [newer.request_id]
    assert scheduler.wait_tracker.current_reason(newer) == PREEMPTED
    for now in (3.0, 4.0):  # older decodes to its 4th token and finishes
        step_at(scheduler, now)
    assert older.is_finished
    live = scheduler.wait_tracker.breakdown(newer, now=4.5)  # still waiting: read it live
    only(live, queue=1.0, preempted=2.5)
    step_at(scheduler, 5.0)  # newer is recomputed
    while scheduler.has_unfinished_requests:
        step_at(scheduler, 6.0)
    waits = RequestMetrics.from_request(newer).waits
    only(waits, queue=1.0, preempted=3.0)
    assert waits.num_wait_steps[PREEMPTED] == 3 and waits.num_preemptions == 1
    assert waits.num_prefill_chunks == 2  # its prompt, then prompt + output recomputed
    assert_sums_match_the_timestamps(newer)
    assert_idle_and_clean(scheduler)


def test_an_aborted_waiting_request_keeps_the_wait_it_had():
    scheduler = make_scheduler(max_num_seqs=1)
    first = distinct(4, 8, 0.0)
    waiting = distinct(4, 1, 0.0)
    add_at(scheduler, first)
    add_at(scheduler, waiting)
    step_at(scheduler, 1.0)
    step_at(scheduler, 2.0)
    assert scheduler.wait_tracker.current_reason(waiting) == MAX_NUM_SEQS
    scheduler.finish_request(waiting.request_id, FinishReason.ABORT, now=2.5)
    only(RequestMetrics.from_request(waiting).waits, queue=1.0, max_num_seqs=1.5)
    scheduler.finish_request(first.request_id, FinishReason.ABORT, now=3.0)
    assert_idle_and_clean(scheduler)


def test_live_reads_of_the_head_include_its_own_reason_up_to_now():
    scheduler = make_scheduler(num_blocks=4, block_size=4, max_model_len=16)
    first = distinct(10, 4, 0.0)
    blocked = distinct(6, 2, 0.0)
    add_at(scheduler, first)
    add_at(scheduler, blocked)
    step_at(scheduler, 1.0)
    assert scheduler.wait_tracker.current_reason(blocked) == KV_BLOCKS
    only(scheduler.wait_tracker.breakdown(blocked, now=1.75), queue=1.0, kv_blocks=0.75)
    assert scheduler.wait_tracker.current_reason(first) is None


def test_the_breakdown_survives_its_wire_form():
    breakdown = WaitBreakdown(
        wait_s={**dict.fromkeys(WAIT_REASONS, 0.0), KV_BLOCKS: 1.5, QUEUE: 0.25},
        num_wait_steps={**dict.fromkeys(WAIT_REASONS, 0), KV_BLOCKS: 3, QUEUE: 1},
        token_budget_taken_by="req-3",
        num_prefill_chunks=2,
        prefill_chunk_sizes=(8, 4),
        num_prefill_tokens=12,
        num_cached_tokens=16,
        num_preemptions=1,
    )
    assert WaitBreakdown.from_dict(breakdown.to_dict()) == breakdown
    assert WaitBreakdown.from_dict(None) is None
    assert WaitBreakdown.from_dict({"wait_s": "x"}) == WaitBreakdown()


def test_a_step_writes_to_no_waiting_request_but_the_head():
    """O(1) per step: the shared clock moves, the queue's requests are left alone."""
    scheduler = make_scheduler(num_blocks=4, block_size=4, max_model_len=16)
    first = distinct(10, 4, 0.0)
    add_at(scheduler, first)
    queued = [distinct(6, 1, 0.0) for _ in range(200)]
    for request in queued:
        add_at(scheduler, request)
    before = [(r.waits.spell, dict(r.waits.spell.own_seconds)) for r in queued]
    for now in (1.0, 2.0, 3.0):
        step_at(scheduler, now)
    after = [(r.waits.spell, dict(r.waits.spell.own_seconds)) for r in queued]
    changed = [r for r, old, new in zip(queued, before, after, strict=True) if old != new]
    assert changed == [queued[0]]  # the head, held by kv_blocks, corrected
    only(scheduler.wait_tracker.breakdown(queued[-1], now=3.0), queue=3.0)
