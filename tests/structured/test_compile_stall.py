"""A grammar whose compile is pending never stalls other requests, counted rather than timed.

The compiler's gate holds one compile for as long as the test needs (no sleep, no timing
assumption). Meanwhile unconstrained requests must be scheduled and decoded on every step:
each step after the first output carries a token for each of them, so they end in as many
steps as they would alone; the held request never reaches the scheduler. Released, it
then runs to a valid output. Both scheduling modes.
"""

from __future__ import annotations

import threading

import pytest

from llmd.llm import LLM
from llmd.sampling_params import SamplingParams
from tests.scheduling_mode import MODES, mode_id
from tests.structured.constraints import check_output

NUM_FREE = 4
NUM_FREE_TOKENS = 16
HELD = {"regex": "[d-f]{5}"}


@pytest.fixture(scope="module", params=MODES, ids=mode_id)
def engine(request):
    engine = LLM(device="cpu", dtype="float32", async_scheduling=request.param).engine
    engine.add_request([1], SamplingParams(max_tokens=4, structured_outputs={"regex": "w"}))
    while engine.has_unfinished_requests():  # makes engine.grammars and its compiler
        engine.step()
    return engine


def _add_free(engine, tag: str) -> list[str]:
    params = SamplingParams(temperature=1.0, seed=3, max_tokens=NUM_FREE_TOKENS, ignore_eos=True)
    request_ids = [f"{tag}-{index}" for index in range(NUM_FREE)]
    for index, request_id in enumerate(request_ids):
        engine.add_request([5, 6, 7 + index], params, request_id=request_id)
    return request_ids


def _steps_until_done(engine, request_ids: list[str], held_id: str | None) -> list[int]:
    """Tokens the free requests got per step, until all ended; checks the held one each step."""
    tokens_per_step: list[int] = []
    done: set[str] = set()
    while len(done) < len(request_ids):
        assert len(tokens_per_step) < 10 * NUM_FREE_TOKENS, "the free requests stopped"
        updates = engine.step().updates
        tokens_per_step.append(
            sum(len(u.new_token_ids) for u in updates if u.request.request_id in request_ids)
        )
        done |= {u.request.request_id for u in updates if u.request.is_finished}
        if held_id is not None:
            assert held_id in engine.grammars.compiling  # still pending: the gate holds it
            assert held_id not in engine.scheduler.requests
    return tokens_per_step


def test_other_requests_decode_every_step_while_a_compile_is_held(engine):
    alone = _steps_until_done(engine, _add_free(engine, "alone"), None)
    while engine.has_unfinished_requests():
        engine.step()
    gate = threading.Event()
    engine.grammars.compiler.compile_gate = gate
    try:
        held = SamplingParams(temperature=1.0, seed=1, max_tokens=20, structured_outputs=HELD)
        engine.add_request([5, 6], held, request_id="held")
        loaded = _steps_until_done(engine, _add_free(engine, "loaded"), "held")
    finally:
        gate.set()
        engine.grammars.compiler.compile_gate = None
    assert sum(loaded) == sum(alone) == NUM_FREE * NUM_FREE_TOKENS
    assert len(loaded) == len(alone)  # not one step more with the compile pending
    first_output = next(i for i, n in enumerate(loaded) if n)
    assert all(n == NUM_FREE for n in loaded[first_output:]), loaded  # all decode each step
    updates = []
    while engine.has_unfinished_requests():  # released, the held request runs and finishes
        updates += [u for u in engine.step().updates if u.request.request_id == "held"]
    request = updates[-1].request
    assert request.is_finished and request.finish_reason.value == "stop"
    check_output(HELD, engine.tokenizer.decode(request.output_token_ids))
