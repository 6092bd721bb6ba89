"""Constrained decoding through the engine: every output satisfies its constraint.

The shipped default model (a real tokenizer) samples at temperature 1, seeded, in both
scheduling modes; without the mask its outputs are free text, so every check here fails
if the mask, the matcher's advance or the EOS rule breaks.
"""

from __future__ import annotations

import math

import pytest

from llmd.engine.request import FinishReason
from llmd.llm import LLM
from llmd.sampling_params import SamplingParams
from tests.scheduling_mode import MODES, mode_id
from tests.structured.constraints import ANSWERS, BASIC, PERSON, PHONE, check_output


@pytest.fixture(scope="module", params=MODES, ids=mode_id)
def llm(request):
    return LLM(device="cpu", dtype="float32", async_scheduling=request.param)


def _params(spec: dict, seed: int, **kwargs) -> SamplingParams:
    return SamplingParams(
        temperature=1.0, seed=seed, max_tokens=120, structured_outputs=spec, **kwargs
    )


def test_every_output_satisfies_its_constraint(llm):
    specs = [BASIC[i % len(BASIC)] for i in range(24)]
    outputs = llm.generate(["Hello"] * len(specs), [_params(s, i) for i, s in enumerate(specs)])
    for spec, output in zip(specs, outputs):
        check_output(spec, output.text)
        assert output.finish_reason == "stop"


def test_the_same_seed_gives_the_same_output_in_any_batch(llm):
    spec = {"json": PERSON}
    alone = llm.generate(["Hi"], [_params(spec, 7)])[0].text
    batched = llm.generate(["Hi", "Other"] * 3, [_params(spec, 7)] + [_params(spec, 1)] * 5)
    assert batched[0].text == alone


def test_greedy_choice_with_penalties_and_constrained_logprobs(llm):
    spec = {"choice": ANSWERS}
    params = SamplingParams(
        temperature=0.0, max_tokens=8, structured_outputs=spec, logprobs=5,
        repetition_penalty=1.3, presence_penalty=0.5,
    )  # fmt: skip
    output = llm.generate(["Is it?"], [params])[0]
    assert output.text in ANSWERS
    first = output.logprobs[0]
    # Only tokens that begin a choice have probability: no -inf alternative is reported.
    assert 1 <= len(first.top_token_ids) <= 5
    assert all(math.isfinite(value) for value in first.top_logprobs)
    texts = [llm.engine.tokenizer.decode([token_id]) for token_id in first.top_token_ids]
    assert all(any(a.startswith(t) for a in ANSWERS) for t in texts), texts


def test_outputs_stay_valid_under_preemption_and_chunked_prefill():
    llm = LLM(device="cpu", dtype="float32", num_blocks=40, block_size=4, max_num_batched_tokens=16)
    prompts = [f"Once upon a time there were {i} small robots who" for i in range(12)]
    specs = [{"json": PERSON} if i % 3 else {"regex": PHONE} for i in range(12)]
    outputs = llm.generate(prompts, [_params(s, i) for i, s in enumerate(specs)])
    assert llm.engine.scheduler.num_preemptions > 0
    for spec, output in zip(specs, outputs):
        check_output(spec, output.text)


def test_an_uncompilable_regex_fails_its_request_with_the_field_named(llm):
    engine = llm.engine
    engine.add_request([1, 2, 3], _params({"regex": "a(b"}, 0), request_id="bad-regex")
    updates = []
    while engine.has_unfinished_requests():
        updates += engine.step().updates
    (update,) = [u for u in updates if u.request.request_id == "bad-regex"]
    assert update.request.finish_reason is FinishReason.ERROR
    assert "structured_outputs.regex" in update.request.error_message
    assert "unclosed group" in update.request.error_message


def test_ignore_eos_is_refused_with_a_constraint():
    with pytest.raises(ValueError, match="ignore_eos"):
        SamplingParams(ignore_eos=True, structured_outputs={"regex": "a+"})
