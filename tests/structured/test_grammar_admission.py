"""Constrained requests wait for their grammar in their own state, never stalling the engine.

A fake slow compile (the compiler's delay) stands in for a costly schema: other requests
run to the end meanwhile, a compile past the limit fails its request with a typed error,
an abort while compiling frees everything, and a second request with the same constraint
reuses the compiled grammar.
"""

from __future__ import annotations

import pytest

from llmd.engine.request import FinishReason
from llmd.llm import LLM
from llmd.sampling_params import SamplingParams
from tests.structured.constraints import PERSON, check_output


@pytest.fixture(scope="module")
def engine():
    return LLM(device="cpu", dtype="float32").engine


def _constrained(spec: dict, max_tokens: int = 80) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, structured_outputs=spec)


def _run_all(engine) -> list:
    updates = []
    while engine.has_unfinished_requests():
        updates += engine.step().updates
    return updates


def _set_delay(engine, delay_s: float) -> None:
    engine.add_request([1], _constrained({"regex": "warm"}, 4), request_id="warm")
    _run_all(engine)  # makes engine.grammars
    engine.grammars.compiler.compile_delay_s = delay_s


def test_a_slow_grammar_does_not_hold_other_requests(engine):
    _set_delay(engine, 1.0)
    try:
        engine.add_request([5, 6, 7], _constrained({"regex": "[a-c]{4}"}), request_id="slow")
        engine.add_request([5, 6, 8], SamplingParams(temperature=0.0, max_tokens=12),
                           request_id="free")  # fmt: skip
        free_done_while_compiling = False
        while engine.has_unfinished_requests():
            for update in engine.step().updates:
                if update.request.request_id == "free" and update.request.is_finished:
                    free_done_while_compiling = "slow" in engine.grammars.compiling
                    assert update.request.num_output_tokens == 12
        assert free_done_while_compiling
        slow = [r for r in [engine.scheduler.requests.get("slow")] if r is not None]
        assert not slow  # finished too
    finally:
        engine.grammars.compiler.compile_delay_s = 0.0


def test_a_compile_past_the_limit_fails_its_request_with_a_typed_error(engine):
    _set_delay(engine, 0.5)
    limit = engine.grammars.compiling.timeout_s
    engine.grammars.compiling.timeout_s = 0.05
    try:
        engine.add_request([5], _constrained({"regex": "[x-z]{5}"}), request_id="late")
        (update,) = [u for u in _run_all(engine) if u.request.request_id == "late"]
    finally:
        engine.grammars.compiling.timeout_s = limit
        engine.grammars.compiler.compile_delay_s = 0.0
    assert update.request.finish_reason is FinishReason.ERROR
    assert "GrammarTimeoutError" in update.request.error_message
    assert "structured_outputs.regex" in update.request.error_message


def test_an_abort_while_compiling_frees_the_request(engine):
    _set_delay(engine, 0.3)
    try:
        engine.add_request([5], _constrained({"regex": "[k-m]{3}"}), request_id="gone")
        assert "gone" in engine.grammars.compiling
        aborted = engine.abort_request("gone")
    finally:
        engine.grammars.compiler.compile_delay_s = 0.0
    assert aborted is not None and aborted.finish_reason is FinishReason.ABORT
    assert not engine.has_unfinished_requests()
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks


def test_equal_constraints_share_one_compile(engine):
    engine.add_request([9], _constrained({"json": PERSON}), request_id="first")
    _run_all(engine)
    compiles = engine.grammars.compiler.num_compiles
    engine.add_request([9, 9], _constrained({"json": dict(reversed(PERSON.items()))}),
                       request_id="second")  # fmt: skip
    assert "second" not in engine.grammars.compiling  # admitted at once: cached
    updates = [u for u in _run_all(engine) if u.request.request_id == "second"]
    assert engine.grammars.compiler.num_compiles == compiles
    text = engine.tokenizer.decode(updates[-1].request.output_token_ids)
    check_output({"json": PERSON}, text)


def test_a_duplicate_id_is_refused_while_the_first_compiles(engine):
    _set_delay(engine, 0.3)
    try:
        engine.add_request([5], _constrained({"regex": "[p-r]{3}"}), request_id="twice")
        with pytest.raises(ValueError, match="already in use"):
            engine.add_request([5], _constrained({"regex": "[p-r]{3}"}), request_id="twice")
        with pytest.raises(ValueError, match="already in use"):  # unconstrained, same id
            engine.add_request([5], SamplingParams(max_tokens=2), request_id="twice")
    finally:
        engine.grammars.compiler.compile_delay_s = 0.0
    _run_all(engine)
