"""The runner frees a request's state only when a plan names it: ended requests' rows and
sampling state go even when the plan that names them is empty (not run)."""

from __future__ import annotations

import pytest

from llmd.config import EngineConfig
from llmd.llm_engine import LLMEngine
from llmd.sampling_params import SamplingParams
from tests.scheduling_mode import MODES, mode_id

PENALIZED = SamplingParams(temperature=0.8, seed=1, frequency_penalty=0.5, max_tokens=50)


@pytest.mark.parametrize("is_async", MODES, ids=mode_id)
def test_aborts_free_rows_and_sampling_state_through_an_empty_plan(tiny_model_dir, is_async):
    config = EngineConfig.from_kwargs(
        model=str(tiny_model_dir), device="cpu", num_blocks=64, block_size=4,
        async_scheduling=is_async,
    )  # fmt: skip
    engine = LLMEngine(config)
    requests = [engine.add_request([5, 6, 7 + i], PENALIZED) for i in range(3)]
    for _ in range(4):
        engine.step()
    runner = engine.runner
    assert runner.persistent_batch.num_rows_in_use == 3
    assert runner.sampling_state.num_requests == 3
    for request in requests:
        engine.abort_request(request.request_id)
    while engine.has_unfinished_requests():
        engine.step()
    engine.step()  # the plan naming the aborts has nothing to run
    assert runner.persistent_batch.num_rows_in_use == 0
    assert runner.sampling_state.num_requests == 0
    # A request reusing a freed id is new to the runner and runs from its own state.
    again = engine.add_request([5, 6, 7], PENALIZED, request_id=requests[0].request_id)
    while engine.has_unfinished_requests():
        engine.step()
    assert again.num_output_tokens == 50
