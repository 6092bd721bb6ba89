"""Speculative decoding in the scheduler, no model: drafts within every limit, the accepted
run, K/V rolled back past rejected drafts, stops inside a run, counts, a batch proposer asked
once a step and told who left, and no leaked block."""

from __future__ import annotations

import pytest

from llmd.config import SchedulerConfig
from llmd.engine.block_manager import BlockManager
from llmd.engine.request import FinishReason
from llmd.engine.scheduler import Scheduler
from llmd.engine.speculator import Speculator, accepted_run
from tests.engine.factories import EOS, assert_idle_and_clean, make_request


class FixedProposer:
    """Proposes the same draft every time (cut to what is asked), counting the asks."""

    def __init__(self, draft_ids: list[int]) -> None:
        self.draft_ids = draft_ids
        self.asked: list[int] = []

    def propose(self, token_ids, max_num_tokens):
        self.asked.append(max_num_tokens)
        return self.draft_ids[:max_num_tokens]


def make_speculating_scheduler(
    draft_ids: list[int], num_speculative_tokens: int = 3, max_model_len: int = 128,
    max_num_batched_tokens: int = 64, num_blocks: int = 64,
) -> tuple[Scheduler, FixedProposer]:  # fmt: skip
    proposer = FixedProposer(draft_ids)
    config = SchedulerConfig(
        max_num_seqs=8, max_num_batched_tokens=max_num_batched_tokens, max_model_len=max_model_len
    )
    speculator = Speculator(proposer, num_speculative_tokens, max_model_len)
    return Scheduler(config, BlockManager(num_blocks, 4), speculator), proposer


def step(scheduler: Scheduler, samples: dict[str, list[int]] | int = 5):
    """Schedule and apply one step: `samples` per verify chunk (else `int` everywhere)."""
    plan = scheduler.schedule()
    sampled, verified = {}, {}
    for chunk in plan.chunks:
        request_id = chunk.request.request_id
        if chunk.num_draft_tokens:
            given = samples if isinstance(samples, int) else None
            run = [given] * chunk.num_new_tokens if given is not None else samples[request_id]
            assert len(run) == chunk.num_new_tokens
            verified[request_id] = run
            sampled[request_id] = run[-1]
        elif chunk.is_sampling:
            sampled[request_id] = samples if isinstance(samples, int) else 5
    finished = scheduler.update_from_output(plan, sampled, None, verified)
    return plan, finished


@pytest.mark.parametrize(
    ("draft_ids", "sampled_ids", "want"),
    [
        ([4, 5, 6], [4, 5, 6, 7], [4, 5, 6, 7]),  # all accepted, plus the bonus
        ([4, 5, 6], [4, 9, 6, 7], [4, 9]),  # second rejected: the target's token instead
        ([4, 5, 6], [8, 5, 6, 7], [8]),  # none accepted: one token, as a plain decode
        ([4], [4, 2], [4, 2]),
    ],
)
def test_the_accepted_run_is_the_matching_samples_and_one_more(draft_ids, sampled_ids, want):
    assert accepted_run(draft_ids, sampled_ids) == want


def test_a_decode_is_scheduled_with_its_drafts_and_rolls_back_past_rejected_ones():
    scheduler, _ = make_speculating_scheduler([21, 22, 23])
    request = make_request(num_prompt_tokens=6, max_tokens=20)
    scheduler.add_request(request)
    plan, _ = step(scheduler, 7)  # the prefill samples 7: no draft yet
    assert not any(chunk.num_draft_tokens for chunk in plan.chunks)
    plan, _ = step(scheduler, {request.request_id: [21, 30, 23, 24]})
    (chunk,) = plan.chunks
    assert (chunk.num_new_tokens, chunk.num_draft_tokens) == (4, 3)
    assert chunk.token_ids == [7, 21, 22, 23]
    assert chunk.num_computed_tokens == 6
    assert plan.num_verify_tokens == 4 and plan.num_decode_tokens == 0
    # 21 accepted, 30 replaces 22; 23 and the bonus are dropped with the rejected draft.
    assert request.output_token_ids == [7, 21, 30]
    assert request.num_computed_tokens == 8  # K/V of 7 and 21; 30 is the next input
    assert (request.num_drafts, request.num_draft_tokens, request.num_accepted_tokens) == (1, 3, 1)
    # The next verify chunk starts at the rollback point, with the new last token.
    plan, _ = step(scheduler, {request.request_id: [21, 22, 23, 25]})
    assert plan.chunks[0].num_computed_tokens == 8
    assert plan.chunks[0].token_ids == [30, 21, 22, 23]
    assert request.output_token_ids == [7, 21, 30, 21, 22, 23, 25]
    assert request.num_computed_tokens == 12
    totals = scheduler.speculator.totals
    assert (totals.num_drafts, totals.num_draft_tokens, totals.num_accepted_tokens) == (2, 6, 4)
    assert totals.accepted_per_position == [2, 1, 1]
    assert totals.mean_acceptance_length == 3.0
    scheduler.finish_request(request.request_id, FinishReason.ABORT)
    assert_idle_and_clean(scheduler)


def test_only_full_blocks_of_accepted_tokens_enter_the_prefix_cache():
    scheduler, _ = make_speculating_scheduler([21, 22, 23])
    request = make_request(num_prompt_tokens=7, max_tokens=20)  # block size 4
    scheduler.add_request(request)
    step(scheduler, 7)  # 7 prompt tokens computed, 1 block full
    step(scheduler, {request.request_id: [40, 41, 42, 43]})  # nothing accepted
    # Tokens 7 (prompt) + the 7 input: 8 computed = 2 full blocks; the drafts' slots in
    # block 3 were written but are not cached.
    assert request.num_computed_tokens == 8
    manager = scheduler.block_manager
    cached = [manager.blocks[b].block_hash is not None for b in request.block_ids]
    assert cached == [True, True, False]
    assert manager.blocks[request.block_ids[1]].token_ids == (5, 6, 7, 7)  # prompt 1..7, then 7
    scheduler.finish_request(request.request_id, FinishReason.ABORT)
    assert_idle_and_clean(scheduler)


def test_drafts_stay_within_max_tokens_max_model_len_and_the_budget():
    scheduler, proposer = make_speculating_scheduler([21, 22, 23])
    short = make_request(num_prompt_tokens=4, max_tokens=3)
    scheduler.add_request(short)
    step(scheduler, 21)
    # One output; max_tokens 3 leaves room for 2 more, so 1 draft + its bonus at most.
    plan, finished = step(scheduler, 21)
    assert plan.chunks[0].num_draft_tokens == 1 and proposer.asked[-1] == 1
    assert finished == [short] and short.finish_reason is FinishReason.LENGTH
    assert short.num_output_tokens == 3
    assert_idle_and_clean(scheduler)
    speculator = Speculator(FixedProposer([21, 22, 23]), 3, max_model_len=12)
    near_the_end = make_request(num_prompt_tokens=10, max_tokens=50)
    assert speculator.drafts_for(near_the_end, 64) == [21]  # 10 + 1 draft + bonus = 12
    assert speculator.drafts_for(make_request(num_prompt_tokens=11), 64) == []
    assert speculator.drafts_for(make_request(num_prompt_tokens=3), 3) == [21, 22]  # budget
    tight, proposer = make_speculating_scheduler([21, 22, 23], max_num_batched_tokens=3)
    request = make_request(num_prompt_tokens=2, max_tokens=50)
    tight.add_request(request)
    step(tight, 21)
    plan, _ = step(tight, 21)
    assert plan.chunks[0].num_new_tokens == 3  # the budget: 1 + 2 drafts
    tight.finish_request(request.request_id, FinishReason.ABORT)
    assert_idle_and_clean(tight)


def test_a_stop_inside_the_run_ends_the_request_there():
    scheduler, _ = make_speculating_scheduler([21, 22, 23])
    eos = make_request(num_prompt_tokens=5, max_tokens=20, ignore_eos=False)
    stop = make_request(num_prompt_tokens=5, max_tokens=20, stop_token_ids=(22,))
    for request in (eos, stop):
        scheduler.add_request(request)
    step(scheduler, 9)
    samples = {eos.request_id: [21, EOS, 23, 24], stop.request_id: [21, 22, 23, 24]}
    _, finished = step(scheduler, samples)
    assert set(finished) == {eos, stop}
    assert eos.output_token_ids == [9, 21, EOS] and eos.finish_reason is FinishReason.STOP
    assert stop.output_token_ids == [9, 21, 22] and stop.stop_reason == 22
    assert_idle_and_clean(scheduler)


def test_opted_out_requests_do_not_draft_and_penalized_ones_do():
    scheduler, proposer = make_speculating_scheduler([21, 22, 23])
    opted_out = make_request(num_prompt_tokens=4, max_tokens=20, can_speculate=False)
    penalized = make_request(num_prompt_tokens=4, max_tokens=20, presence_penalty=0.5)
    for request in (opted_out, penalized):
        scheduler.add_request(request)
    step(scheduler, 9)
    plan, _ = step(scheduler, 9)
    # The runner penalizes each draft position as if the drafts before it were output.
    assert {chunk.request_id: chunk.num_draft_tokens for chunk in plan.chunks} == {
        opted_out.request_id: 0, penalized.request_id: 3,
    }  # fmt: skip
    assert len(proposer.asked) == 1
    for request in (opted_out, penalized):
        scheduler.finish_request(request.request_id, FinishReason.ABORT)
    assert_idle_and_clean(scheduler)


def test_without_blocks_for_its_drafts_a_request_decodes_plainly():
    # 4 blocks of 4 tokens: the two prompts take all 4; the drafts would need a third
    # block for `request`, which decodes one token instead (its second block has room).
    scheduler, _ = make_speculating_scheduler([21, 22, 23], num_blocks=4)
    request = make_request(num_prompt_tokens=7, max_tokens=5)
    hog = make_request(num_prompt_tokens=8, max_tokens=4, can_speculate=False)
    scheduler.add_request(request)
    scheduler.add_request(hog)
    step(scheduler, 9)
    assert scheduler.block_manager.num_free_blocks == 0
    plan, _ = step(scheduler, 9)
    chunk = next(chunk for chunk in plan.chunks if chunk.request is request)
    assert (chunk.num_new_tokens, chunk.num_draft_tokens) == (1, 0)
    assert plan.preempted_request_ids == [hog.request_id]  # it needed a block for its token
    for live in list(scheduler.requests):
        scheduler.finish_request(live, FinishReason.ABORT)
    assert_idle_and_clean(scheduler)


def test_drafts_that_keep_missing_back_off_and_a_hit_resets_the_backoff():
    scheduler, _ = make_speculating_scheduler([21, 22, 23])
    request = make_request(num_prompt_tokens=4, max_tokens=100)
    scheduler.add_request(request)
    step(scheduler, 5)
    pattern = []
    for _ in range(12):  # every sample is 5: no draft token ever matches
        plan, _ = step(scheduler, 5)
        pattern.append("d" if plan.chunks[0].num_draft_tokens else "-")
    # Misses in a row skip 1, 2, 4 steps before drafting again.
    assert "".join(pattern) == "d-d--d----d-"
    while not step(scheduler, {request.request_id: [21, 22, 23, 24]})[0].chunks[0].num_draft_tokens:
        pass  # plain decodes until the backoff ends; that verify step accepts everything
    assert request.num_missed_drafts == 0
    plan, _ = step(scheduler, 5)
    assert plan.chunks[0].num_draft_tokens == 3  # drafting again at once
    scheduler.finish_request(request.request_id, FinishReason.ABORT)
    assert_idle_and_clean(scheduler)


class BatchRecorder:
    """A batch proposer: the same draft for every ask (cut to it), recording asks and
    releases."""

    def __init__(self, draft_ids: list[int]) -> None:
        self.draft_ids = draft_ids
        self.asks: list[list[tuple[str, int]]] = []
        self.released: list[str] = []

    def propose_batch(self, asks):
        self.asks.append([(ask.request_id, ask.max_num_tokens) for ask in asks])
        return [self.draft_ids[: ask.max_num_tokens] for ask in asks]

    def release(self, request_id):
        self.released.append(request_id)


def test_a_batch_proposer_is_asked_once_a_step_for_every_decode_and_told_who_left():
    proposer = BatchRecorder([21, 22, 23])
    config = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=6, max_model_len=128)
    scheduler = Scheduler(config, BlockManager(64, 4), Speculator(proposer, 3, 128))
    first = make_request(num_prompt_tokens=3, max_tokens=20)
    second = make_request(num_prompt_tokens=3, max_tokens=3)
    for request in (first, second):
        scheduler.add_request(request)
    step(scheduler, 9)  # both prefills: no decode to ask for
    assert proposer.asks == []
    late = make_request(num_prompt_tokens=9, max_tokens=20)
    scheduler.add_request(late)
    plan, _ = step(scheduler, 9)
    # One ask for both decodes (second: max_tokens leaves 1 draft); the prefill is not asked.
    assert proposer.asks == [[(first.request_id, 3), (second.request_id, 1)]]
    assert [(c.request.request_id, c.token_ids) for c in plan.chunks] == [
        (first.request_id, [9, 21, 22, 23]),  # 4 of the budget's 6 tokens
        (second.request_id, [9, 21]),  # the 2 left
    ]
    assert proposer.released == []
    scheduler.finish_request(first.request_id, FinishReason.ABORT)
    assert proposer.released == [first.request_id]
    while scheduler.has_unfinished_requests:
        step(scheduler, 9)
    assert set(proposer.released) == {first.request_id, second.request_id, late.request_id}
    assert_idle_and_clean(scheduler)


def test_a_batch_proposer_forgets_a_preempted_request():
    proposer = BatchRecorder([21, 22, 23])
    config = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=128)
    scheduler = Scheduler(config, BlockManager(4, 4), Speculator(proposer, 3, 128))
    older = make_request(num_prompt_tokens=7, max_tokens=9, can_speculate=False)
    newer = make_request(num_prompt_tokens=8, max_tokens=4)
    for request in (older, newer):
        scheduler.add_request(request)
    step(scheduler, 9)  # 2 + 2 blocks: the pool is full
    plan, _ = step(scheduler, 9)  # older needs a block for its token: newer is preempted
    assert plan.preempted_request_ids == [newer.request_id]
    assert proposer.released == [newer.request_id]
    for live in list(scheduler.requests):
        scheduler.finish_request(live, FinishReason.ABORT)
    assert_idle_and_clean(scheduler)
