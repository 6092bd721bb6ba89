"""Speculative decoding beside a step in flight (async scheduling), no model: a plan made
while a step is in flight drafts nothing and asks no proposer, and `wants_drafts` tells
whether a decode would draft once its sample in flight is known (not when it opted out,
backs off, has no room, is not decoding, or its proposer has nothing)."""

from __future__ import annotations

from llmd.config import SchedulerConfig
from llmd.engine.block_manager import BlockManager
from llmd.engine.request import PENDING_TOKEN_ID, FinishReason
from llmd.engine.scheduler import Scheduler
from llmd.engine.speculator import Speculator
from tests.engine.factories import assert_idle_and_clean, make_request, make_scheduler
from tests.engine.test_speculator import BatchRecorder


class RecordingProposer:
    """Proposes `draft_ids` (cut to what is asked), recording the tokens it was shown."""

    def __init__(self, draft_ids: list[int]) -> None:
        self.draft_ids = draft_ids
        self.shown: list[list[int]] = []

    def propose(self, token_ids, max_num_tokens):
        self.shown.append(list(token_ids))
        return self.draft_ids[:max_num_tokens]


def make_scheduler_with(proposer, max_num_batched_tokens: int = 64) -> Scheduler:
    config = SchedulerConfig(
        max_num_seqs=8, max_num_batched_tokens=max_num_batched_tokens, max_model_len=128
    )
    return Scheduler(config, BlockManager(64, 4), Speculator(proposer, 3, 128))


def launch(scheduler: Scheduler, **schedule_kwargs):
    """Schedule a step and count its tokens as launched (placeholders, as the engine does)."""
    plan = scheduler.schedule(**schedule_kwargs)
    return plan, scheduler.advance_in_flight(plan)


def apply(scheduler: Scheduler, plan, placeholders, token_id: int = 9) -> None:
    """Apply a launched plan's samples: `token_id` for every sampling chunk."""
    sampled = {c.request.request_id: token_id for c in plan.chunks if c.is_sampling}
    scheduler.update_from_output(plan, sampled, placeholders)


def finish_all(scheduler: Scheduler) -> None:
    for request_id in list(scheduler.requests):
        scheduler.finish_request(request_id, FinishReason.ABORT)
    assert_idle_and_clean(scheduler)


def test_a_plan_made_with_a_step_in_flight_drafts_nothing_and_asks_no_proposer():
    proposer = RecordingProposer([21, 22, 23])
    scheduler = make_scheduler_with(proposer)
    request = make_request(num_prompt_tokens=6, max_tokens=20)
    scheduler.add_request(request)
    apply(scheduler, *launch(scheduler))  # the prefill: its sample is known
    plan, placeholders = launch(scheduler, may_draft=False)  # as while another step flies
    assert [(c.num_new_tokens, c.num_draft_tokens) for c in plan.chunks] == [(1, 0)]
    assert plan.num_verify_tokens == 0 and proposer.shown == []
    apply(scheduler, plan, placeholders)
    plan = scheduler.schedule()  # nothing in flight: the decode drafts again
    assert [(c.num_new_tokens, c.num_draft_tokens) for c in plan.chunks] == [(4, 3)]
    assert plan.chunks[0].token_ids == [9, 21, 22, 23]
    finish_all(scheduler)


def test_a_batch_proposer_is_not_run_for_a_plan_made_with_a_step_in_flight():
    proposer = BatchRecorder([21, 22, 23])
    scheduler = make_scheduler_with(proposer)
    request = make_request(num_prompt_tokens=6, max_tokens=20)
    scheduler.add_request(request)
    apply(scheduler, *launch(scheduler))
    plan, _ = launch(scheduler, may_draft=False)
    assert proposer.asks == [] and plan.num_verify_tokens == 0
    assert scheduler.speculator.step_drafts == {}
    finish_all(scheduler)


def test_a_decode_with_its_sample_in_flight_wants_drafts_from_the_tokens_known():
    proposer = RecordingProposer([21, 22, 23])
    scheduler = make_scheduler_with(proposer)
    request = make_request(num_prompt_tokens=6, max_tokens=20)
    scheduler.add_request(request)
    launch(scheduler)
    assert request.all_token_ids[-1] == PENDING_TOKEN_ID
    assert scheduler.wants_drafts()
    # Prompt lookup is tried on the tokens known (one behind), never on a placeholder.
    assert proposer.shown == [request.prompt_token_ids]
    finish_all(scheduler)


def test_no_drafts_are_wanted_when_none_would_be_made():
    proposer = RecordingProposer([21, 22, 23])
    scheduler = make_scheduler_with(proposer)
    opted_out = make_request(num_prompt_tokens=6, max_tokens=20, can_speculate=False)
    backing_off = make_request(num_prompt_tokens=6, max_tokens=20)
    no_room = make_request(num_prompt_tokens=6, max_tokens=2)  # one more token: no draft
    for request in (opted_out, backing_off, no_room):
        scheduler.add_request(request)
    launch(scheduler)
    backing_off.no_draft_until = backing_off.num_output_tokens + 4
    assert not scheduler.wants_drafts()
    assert proposer.shown == []  # each ruled out before its proposer was asked
    backing_off.no_draft_until = 0
    assert scheduler.wants_drafts()  # the backoff is over: it would draft
    proposer.draft_ids = []
    assert not scheduler.wants_drafts()  # ... but its proposer has nothing to offer
    finish_all(scheduler)


def test_a_prefill_wants_no_drafts_and_a_draft_model_always_would():
    recorder = BatchRecorder([21, 22, 23])
    scheduler = make_scheduler_with(recorder, max_num_batched_tokens=8)
    request = make_request(num_prompt_tokens=12, max_tokens=20)
    scheduler.add_request(request)
    plan, placeholders = launch(scheduler)  # 8 of 12 prompt tokens: no sample
    assert placeholders == set() and not scheduler.wants_drafts()
    apply(scheduler, plan, placeholders)
    launch(scheduler)  # the last 4, sampling the first token
    assert scheduler.wants_drafts() and recorder.asks == []  # asked nothing to know it
    finish_all(scheduler)


def test_without_speculative_decoding_no_drafts_are_wanted():
    scheduler = make_scheduler()
    scheduler.add_request(make_request(num_prompt_tokens=6, max_tokens=20))
    launch(scheduler)
    assert scheduler.speculator is None and not scheduler.wants_drafts()
    finish_all(scheduler)
