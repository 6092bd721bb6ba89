"""After a step, in both scheduling modes: the scheduler's one update path and the updates rule.

The pipelined (async) order is simulated on the scheduler alone, with samples that depend
only on a request and a position, so both modes must end every request with the same
tokens whatever the interleaving of plans, preemptions and prefix hits.
"""

from __future__ import annotations

import time

from llmd.engine.request import PENDING_TOKEN_ID, FinishReason
from llmd.engine.scheduler_output import ScheduledChunk, SchedulerOutput
from llmd.engine.step_result import request_updates
from llmd.outputs import TokenLogprob
from llmd.runner.pending_step import RunnerOutput
from tests.engine.factories import assert_idle_and_clean, make_request, make_scheduler

STOP_TOKEN = 13


def _samples(plan: SchedulerOutput) -> dict[str, int]:
    """Each sampling chunk's token, a function of its request and the token's position."""
    samples = {}
    for chunk in plan.chunks:
        if chunk.is_sampling:
            request = chunk.request
            position = request.num_computed_tokens + chunk.num_new_tokens
            seed = sum(map(ord, request.request_id))
            samples[request.request_id] = (seed * 31 + position * 7) % 50 + 1
    return samples


def _workload():
    """Requests sharing prefixes (hits), some ended by a stop token, in a pool that preempts."""
    shared = list(range(20, 28))
    requests = []
    for index in range(8):
        prompt = (shared if index % 2 else []) + [30 + index] * (3 + index)
        stop = (STOP_TOKEN,) if index % 3 == 0 else ()
        requests.append(make_request(prompt_token_ids=prompt, max_tokens=6 + index,
                                     request_id=f"r{index}", stop_token_ids=stop))  # fmt: skip
    return requests


def _run(is_async: bool) -> dict[str, tuple[list[int], FinishReason]]:
    scheduler = make_scheduler(num_blocks=14, block_size=4, max_num_batched_tokens=16)
    requests = _workload()
    for request in requests:
        scheduler.add_request(request)
    in_flight = None  # (plan, samples, placeholder ids) of the launched plan, async only
    for _ in range(1_000):
        if not scheduler.has_unfinished_requests and in_flight is None:
            break
        plan = scheduler.schedule()
        samples = _samples(plan)  # "launched": its tokens are not counted yet
        if not is_async:
            scheduler.update_from_output(plan, samples)
            continue
        if in_flight is not None:
            scheduler.update_from_output(*in_flight)
        in_flight = None
        if not plan.is_empty:
            in_flight = (plan, samples, scheduler.advance_in_flight(plan))
    else:
        raise AssertionError("did not drain")
    assert scheduler.num_preemptions > 0  # the small pool preempted
    assert_idle_and_clean(scheduler)
    return {r.request_id: (r.output_token_ids, r.finish_reason) for r in requests}


def test_the_async_hook_of_the_one_update_path_ends_requests_as_the_sync_path_does():
    sync, pipelined = _run(is_async=False), _run(is_async=True)
    assert pipelined == sync
    assert any(reason is FinishReason.STOP for _, reason in sync.values())
    assert all(PENDING_TOKEN_ID not in tokens for tokens, _ in pipelined.values())


def test_a_placeholder_is_replaced_and_tokens_are_counted_once():
    scheduler = make_scheduler()
    request = make_request(num_prompt_tokens=6, max_tokens=4)
    scheduler.add_request(request)
    plan = scheduler.schedule()
    placeholders = scheduler.advance_in_flight(plan)
    assert placeholders == {request.request_id}
    assert request.num_computed_tokens == 6 and request.all_token_ids[-1] == PENDING_TOKEN_ID
    scheduler.update_from_output(plan, {request.request_id: 9}, placeholders)
    assert request.output_token_ids == [9] and request.num_computed_tokens == 6

    other = make_request(num_prompt_tokens=6, max_tokens=4)
    scheduler.add_request(other)
    plan = scheduler.schedule()  # the synchronous path counts the step's tokens itself
    scheduler.update_from_output(plan, {c.request.request_id: 9 for c in plan.chunks})
    assert other.output_token_ids == [9] and other.num_computed_tokens == 6


def test_updates_give_each_token_and_each_end_exactly_once():
    now = time.monotonic()
    names = ("sampling", "prefill", "aborted", "reported", "stopped")
    sampling, prefilling, aborted, reported, stopped = (make_request(request_id=n) for n in names)
    for request in (sampling, stopped):
        request.append_token(7, now)
    for request in (aborted, reported):
        request.finish(FinishReason.ABORT, now)
    stopped.finish(FinishReason.STOP, now)
    plan = SchedulerOutput([ScheduledChunk(sampling, 1, True), ScheduledChunk(prefilling, 4, False),
                            ScheduledChunk(aborted, 1, True), ScheduledChunk(reported, 1, True),
                            ScheduledChunk(stopped, 1, True)])  # fmt: skip
    logprob = TokenLogprob(7, -0.5, 1, (7,), (-0.5,))
    ended_before, reported_ended = {"aborted", "reported"}, {"reported"}
    output = RunnerOutput({}, logprobs={"sampling": logprob})
    updates, ended = request_updates(plan, output, ended_before, reported_ended)
    got = [(u.request.request_id, u.new_token_ids, u.new_logprobs) for u in updates]
    assert got == [("sampling", [7], [logprob]), ("aborted", [], None), ("stopped", [7], None)]
    assert ended == {"stopped"}
