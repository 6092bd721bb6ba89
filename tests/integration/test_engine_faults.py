"""Engine bugs (a corrupted KV pool, a stalled scheduler) are typed, reported errors, not crashes.

Both are simulated by leaking KV blocks, the likeliest way for either to happen.
"""

from __future__ import annotations

import queue

import pytest

from llmd.config import EngineConfig
from llmd.daemon.engine_loop import AddCommand, EngineLoop, SnapshotCommand
from llmd.engine.request import Request
from llmd.errors import KVCacheIntegrityError
from llmd.llm_engine import LLMEngine
from llmd.metrics.serving_metrics import ServingMetrics
from llmd.sampling_params import SamplingParams

GREEDY_2 = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)


@pytest.fixture
def engine(tiny_model_dir):
    config = EngineConfig.from_kwargs(
        model=str(tiny_model_dir), device="cpu", num_blocks=32, block_size=4
    )
    return LLMEngine(config)


def leak_one_block(engine: LLMEngine) -> None:
    """Simulate a bookkeeping bug: a block held by no live request."""
    assert engine.block_manager.allocate_slots(Request("leak", [1], GREEDY_2), 1)


def run_to_idle(engine: LLMEngine) -> list:
    results = []
    while engine.has_unfinished_requests():
        results.append(engine.step())
    return results


def test_violation_at_idle_is_reported_and_the_pool_rebuilt(engine):
    leak_one_block(engine)
    request = engine.add_request([5, 6, 7], GREEDY_2)
    results = run_to_idle(engine)
    assert request.num_output_tokens == 2  # the request itself completed normally
    errors = [result.integrity_error for result in results if result.integrity_error]
    assert len(errors) == 1 and isinstance(errors[0], KVCacheIntegrityError)
    assert "held by 0" in str(errors[0])
    assert engine.num_integrity_errors == 1
    assert engine.block_manager.usage().num_used == 0  # the leaked block is free again
    engine.block_manager.check_integrity([])
    again = engine.add_request([5, 6, 7], GREEDY_2)
    assert all(result.integrity_error is None for result in run_to_idle(engine))
    assert again.output_token_ids == request.output_token_ids


@pytest.mark.timeout(60)
def test_violation_does_not_kill_the_daemon_engine_loop(engine):
    batches: queue.SimpleQueue = queue.SimpleQueue()
    deaths: list[str] = []
    loop = EngineLoop(engine, ServingMetrics(), batches.put, deaths.append)
    loop.start()
    try:
        for request_id in ("first", "second"):
            leak_one_block(engine)
            loop.submit(AddCommand(request_id, [5, 6, 7], GREEDY_2, 0, 0.0))
            while True:
                batch = batches.get(timeout=30)
                if any(u.is_finished and u.request.request_id == request_id for u in batch.updates):
                    break
        assert loop.is_alive and not deaths and loop.dead_error is None
        assert engine.num_integrity_errors == 2
    finally:
        loop.stop()


@pytest.mark.timeout(60)
def test_stalled_queue_head_fails_with_a_typed_error_and_the_loop_serves_on(engine):
    """Regression: an idle engine that could not admit its head stepped empty plans forever."""
    batches: queue.SimpleQueue = queue.SimpleQueue()
    deaths: list[str] = []
    leaked = Request("leak", [1] * 120, GREEDY_2)
    assert engine.block_manager.allocate_slots(leaked, 120)  # 30 of 32 blocks held by nobody
    loop = EngineLoop(engine, ServingMetrics(), batches.put, deaths.append)
    loop.start()
    try:
        finished: dict[str, Request] = {}
        loop.submit(AddCommand("stuck", [5] * 20, GREEDY_2, 0, 0.0))  # 6 blocks: fits 32
        loop.submit(AddCommand("after", [5, 6, 7], GREEDY_2, 0, 0.0))
        while len(finished) < 2:
            for update in batches.get(timeout=30).updates:
                if update.is_finished:
                    finished[update.request.request_id] = update.request
        stuck = finished["stuck"]
        assert stuck.finish_reason.value == "error"
        assert stuck.error_message.startswith("SchedulerStallError: request 'stuck'")
        assert finished["after"].num_output_tokens == 2  # the queue behind it moved on
        assert loop.is_alive and not deaths
        assert engine.num_integrity_errors == 1  # the leak was found and repaired at idle
    finally:
        loop.stop()


@pytest.mark.timeout(60)
def test_a_failing_stats_collection_is_answered_and_the_loop_serves_on(engine, monkeypatch):
    """A bug in reading the engine's state must not end the engine thread (fail-stop is for
    bugs that may have corrupted it); the snapshot is answered without the engine's part."""
    from llmd.daemon import engine_loop

    def broken(*args, **kwargs):
        raise KeyError("a bug in collect_engine_state")

    monkeypatch.setattr(engine_loop, "collect_engine_state", broken)
    batches: queue.SimpleQueue = queue.SimpleQueue()
    deaths: list[str] = []
    snapshots: queue.SimpleQueue = queue.SimpleQueue()
    loop = EngineLoop(engine, ServingMetrics(), batches.put, deaths.append)
    loop.start()
    try:
        loop.submit(SnapshotCommand(snapshots.put))
        assert snapshots.get(timeout=30) is None  # no engine part: queue and kv are null
        loop.submit(AddCommand("after", [5, 6, 7], GREEDY_2, 0, 0.0))
        while not any(u.is_finished for u in batches.get(timeout=30).updates):
            pass
        assert loop.is_alive and not deaths and loop.dead_error is None
    finally:
        loop.stop()
