"""The acceptance fuzz of structured outputs, offline: 1,000 sampled requests, all valid.

The shipped default model (a real tokenizer) samples at temperature 1, each request with
its own seed, over the 40 bounded constraints of `fuzz_cases` (24 JSON schemas, regexes,
choice lists), in one `generate` call per scheduling mode. Every request must be answered,
end by the grammar (finish reason stop, never the token limit) and validate (jsonschema,
regex fullmatch, membership). A control run of the same requests without the constraint
shows the checks are strict enough to fail free text.
"""

from __future__ import annotations

import json

import pytest

from llmd.llm import LLM
from llmd.sampling_params import SamplingParams
from tests.scheduling_mode import MODES, mode_id
from tests.structured.constraints import check_output
from tests.structured.fuzz_cases import MAX_TOKENS, SCHEMAS, SPECS, describe, prompt_of, spec_of

NUM_REQUESTS = 1000
NUM_CONTROL_REQUESTS = 200


@pytest.fixture(scope="module", params=MODES, ids=mode_id)
def llm(request):
    return LLM(device="cpu", dtype="float32", async_scheduling=request.param)


def _params(index: int, spec: dict | None) -> SamplingParams:
    return SamplingParams(
        temperature=1.0, seed=index, max_tokens=MAX_TOKENS, structured_outputs=spec
    )


def _failures(specs: list[dict], outputs: list) -> list[str]:
    """One line per output that ended on the limit or does not satisfy its constraint."""
    failures = []
    for index, (spec, output) in enumerate(zip(specs, outputs)):
        try:
            assert output.finish_reason == "stop", f"finish_reason {output.finish_reason}"
            check_output(spec, output.text)
        except AssertionError as error:
            failures.append(f"#{index} {describe(spec)}: {error}")
    return failures


def test_the_cases_cover_the_acceptance_kinds():
    kinds = [next(iter(spec)) for spec in SPECS]
    assert len(SCHEMAS) >= 20
    assert kinds.count("regex") >= 5 and kinds.count("choice") >= 5
    assert len({json.dumps(spec, sort_keys=True) for spec in SPECS}) == len(SPECS)  # no repeats


def test_a_thousand_sampled_requests_all_validate(llm):
    specs = [spec_of(index) for index in range(NUM_REQUESTS)]
    prompts = [prompt_of(index) for index in range(NUM_REQUESTS)]
    outputs = llm.generate(prompts, [_params(index, spec) for index, spec in enumerate(specs)])
    assert len(outputs) == NUM_REQUESTS  # every request answered, in order
    assert [output.prompt for output in outputs] == prompts
    failures = _failures(specs, outputs)
    assert not failures, f"{len(failures)} of {NUM_REQUESTS} invalid:\n" + "\n".join(failures)
    # Sampling really explored: most outputs differ (a mask stuck on one path would not).
    assert len({output.text for output in outputs}) > NUM_REQUESTS // 2
    assert not llm.engine.scheduler.has_unfinished_requests  # nothing left behind


def test_without_the_constraints_the_checks_fail(llm):
    specs = [spec_of(index) for index in range(NUM_CONTROL_REQUESTS)]
    prompts = [prompt_of(index) for index in range(NUM_CONTROL_REQUESTS)]
    outputs = llm.generate(prompts, [_params(index, None) for index in range(len(specs))])
    num_valid = NUM_CONTROL_REQUESTS - len(_failures(specs, outputs))
    assert num_valid <= NUM_CONTROL_REQUESTS // 50, num_valid
