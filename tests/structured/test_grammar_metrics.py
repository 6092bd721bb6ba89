"""The engine counts what structured outputs cost: requests by kind, compiles, the queue.

Each test reads the engine's snapshot (`GrammarSection`) and step stats before and after
its own requests, on one shared engine whose compile cache persists across tests, so each
uses constraints of its own and compares deltas.
"""

from __future__ import annotations

import pytest

from llmd.llm import LLM
from llmd.sampling_params import SamplingParams
from llmd.structured.grammar_stats import NUM_RECENT_COMPILES, GrammarStats
from tests.scheduling_mode import MODES, mode_id
from tests.structured.constraints import ANSWERS, PERSON


@pytest.fixture(scope="module")
def engine():
    return LLM(device="cpu", dtype="float32").engine


def _constrained(spec: dict, max_tokens: int = 24) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, structured_outputs=spec)


def _run_all(engine) -> list:
    """Step until idle; every step's stats (None for a step that ran nothing)."""
    stats = []
    while engine.has_unfinished_requests():
        stats.append(engine.step().stats)
    return stats


def test_a_fresh_engine_reports_zeros_before_any_constraint():
    section = GrammarStats().section(num_waiting=0)
    assert section.num_requests == 0 and section.num_compiles == 0
    assert section.requests_by_kind == {
        "json": 0, "json_object": 0, "regex": 0, "choice": 0, "grammar": 0,
    }  # fmt: skip
    assert section.compile_time.count == 0 and section.compile_histogram.count == 0


def test_requests_are_counted_by_kind_and_each_new_constraint_compiles_once(engine):
    before = engine.snapshot().grammar
    specs = [
        {"json": PERSON},
        {"json_object": True},
        {"regex": "[d-f]{3}"},
        {"choice": ANSWERS},
        {"grammar": 'start: "ok" | "fine"'},
        {"regex": "[d-f]{3}"},  # the same regex again: a cache hit
    ]
    for index, spec in enumerate(specs):
        engine.add_request([5, 6], _constrained(spec), request_id=f"kind-{index}")
    _run_all(engine)
    after = engine.snapshot().grammar
    by_kind = {
        k: after.requests_by_kind[k] - before.requests_by_kind.get(k, 0)
        for k in after.requests_by_kind
    }
    assert by_kind == {"json": 1, "json_object": 1, "regex": 2, "choice": 1, "grammar": 1}
    assert after.num_requests - before.num_requests == 6
    new_compiles = after.num_compiles - before.num_compiles
    assert new_compiles == 5
    assert after.num_cache_hits - before.num_cache_hits == 1
    assert after.compile_histogram.count - before.compile_histogram.count == 5
    assert after.compile_histogram.sum > before.compile_histogram.sum
    assert after.compile_time.count == min(NUM_RECENT_COMPILES, after.num_compiles)
    assert after.num_waiting == 0
    assert after.num_compile_failures == before.num_compile_failures


def test_the_queue_gauge_counts_a_slow_compile_until_it_is_done(engine):
    engine.add_request([1], _constrained({"regex": "warm"}, 4), request_id="warm")
    _run_all(engine)  # makes engine.grammars
    engine.grammars.compiler.compile_delay_s = 0.4
    try:
        engine.add_request([5], _constrained({"regex": "[g-i]{4}"}), request_id="slow")
        assert engine.snapshot().grammar.num_waiting == 1
        engine.step()  # the compile is still running: the request still waits
        assert engine.snapshot().grammar.num_waiting == 1
        _run_all(engine)
    finally:
        engine.grammars.compiler.compile_delay_s = 0.0
    section = engine.snapshot().grammar
    assert section.num_waiting == 0
    assert section.compile_time.max >= 0.4  # the slow compile, timed with its delay


def test_failed_and_timed_out_compiles_are_counted(engine):
    before = engine.snapshot().grammar
    engine.add_request([1, 2], _constrained({"regex": "a(b"}), request_id="bad")
    _run_all(engine)
    engine.grammars.compiler.compile_delay_s = 0.3
    limit = engine.grammars.compiling.timeout_s
    engine.grammars.compiling.timeout_s = 0.05
    try:
        engine.add_request([5], _constrained({"regex": "[j-l]{5}"}), request_id="late")
        _run_all(engine)
    finally:
        engine.grammars.compiling.timeout_s = limit
        engine.grammars.compiler.compile_delay_s = 0.0
    after = engine.snapshot().grammar
    assert after.num_compile_failures - before.num_compile_failures == 1
    assert after.num_compile_timeouts - before.num_compile_timeouts == 1
    assert after.compile_histogram.count - before.compile_histogram.count <= 1  # the late one
    assert after.num_waiting == 0


@pytest.mark.parametrize("is_async", MODES, ids=mode_id)
def test_the_grammar_phase_is_the_mask_fill_of_constrained_steps_only(is_async):
    engine = LLM(device="cpu", dtype="float32", async_scheduling=is_async).engine
    engine.add_request([7, 8], SamplingParams(temperature=0.0, max_tokens=6), request_id="free")
    free_steps = [s for s in _run_all(engine) if s is not None]
    assert free_steps and all(s.grammar_s == 0.0 for s in free_steps)
    bound = engine.add_request([7, 8], _constrained({"regex": "[m-o]{6}"}), request_id="bound")
    bound_steps = [s for s in _run_all(engine) if s is not None]
    masked = [s for s in bound_steps if s.grammar_s > 0.0]
    # One masked step per token; a pipelined step launched for a request that its previous
    # step ended carries no mask (the request is left out of it) and shows none.
    assert len(masked) == bound.num_output_tokens > 0
    assert len(bound_steps) - len(masked) <= (1 if is_async else 0)
    if not is_async:  # a pipelined step's total is the calling step's, not the filled plan's
        assert all(s.grammar_s < s.total_s for s in masked)  # a slice of the step
