"""Speculative decoding with a draft model, end to end on tiny models (cpu backend, and torch).

Greedy tokens must not change in any scheduling scenario (alone, batched with prefix hits,
chunked prefill, preemption, async scheduling: its passes run only with no step in flight,
and plain decodes between verify steps pipeline); the target drafting for itself must have
every draft token accepted, which checks the draft's own cache through every catch-up;
a perturbed copy of the target (some drafts accepted, some not) and an unrelated random
checkpoint must leave the output as it is; the counters must reconcile with independently
counted steps; a draft of another vocabulary is refused naming draft_model; and no draft
block or row outlives its request.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from llmd import LLM, SamplingParams
from llmd.errors import InvalidParameterError, ModelNotFoundError
from tests.checkpoints import make_tiny_checkpoint
from tests.spec_counts import SamplingChunkCounter, assert_counts_reconcile
from tests.tiny_model import make_tiny_model

MAX_TOKENS = 24
PATTERN = [11, 12, 13, 14, 15, 16, 17, 18]
GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
SCENARIOS = [
    {"num_blocks": 256},  # alone, batched, then again with prefix hits
    {"num_blocks": 256, "max_num_batched_tokens": 7},  # chunked prefill, verify in budget
    {"num_blocks": 40, "max_num_batched_tokens": 32},  # preemption by a tiny pool
    {"num_blocks": 256, "async_scheduling": True},  # on: only plain decodes pipeline
]
IDS = ["batched", "chunked", "preempted", "async"]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("target"), "llama")


@pytest.fixture(scope="module")
def perturbed_path(model_path, tmp_path_factory):
    """The target with a little noise on every weight: it agrees with the target often."""
    path = tmp_path_factory.mktemp("perturbed")
    shutil.copytree(model_path, path, dirs_exist_ok=True)
    generator = torch.Generator().manual_seed(1)
    weights = load_file(model_path / "model.safetensors")
    noisy = {
        name: tensor + torch.randn(tensor.shape, generator=generator) * 0.01
        for name, tensor in weights.items()
    }
    save_file(noisy, path / "model.safetensors", metadata={"format": "pt"})
    return path


@pytest.fixture(scope="module")
def unrelated_path(tmp_path_factory):
    """Another random checkpoint with the target's vocabulary: it rarely agrees."""
    return make_tiny_model(tmp_path_factory.mktemp("unrelated"), "llama", seed=1)


def prompts_of() -> list[list[int]]:
    """Repetitive prompts, plain ones, a one-token one, and two sharing a prefix."""
    shared = [(7 * i) % 300 + 20 for i in range(24)]
    return [
        PATTERN * 4,
        [5, 9, 3, 7, 5, 9, 3],
        list(range(20, 60)),
        [42],
        shared + [5, 6, 7],
        shared + [9, 10],
    ]


def make_llm(path, draft=None, **kwargs) -> LLM:
    kwargs.setdefault("attention_backend", "cpu")
    if draft is not None:
        kwargs.update(speculative_method="draft", draft_model=str(draft), num_speculative_tokens=4)
    return LLM(str(path), device="cpu", dtype="float32", block_size=4, **kwargs)


def token_ids(llm: LLM, prompts, params=GREEDY) -> list[list[int]]:
    return [output.token_ids for output in llm.generate(prompts, params)]


def assert_draft_state_freed(llm: LLM) -> None:
    """The leak check of the draft: no request's state, every block back, no runner row."""
    proposer = llm.engine.scheduler.speculator.proposer
    assert proposer.sequences == {}
    assert proposer.pool.num_free_blocks == proposer.pool.num_blocks
    assert proposer.runner.persistent_batch.num_rows_in_use == 0


@pytest.fixture(scope="module")
def expected(model_path):
    """The spec-off greedy continuations of `prompts_of()`."""
    return token_ids(make_llm(model_path, num_blocks=256), prompts_of())


def run_scenario(model_path, draft, scenario, expected) -> LLM:
    """Alone, batched and batched again; the output must equal speculation off's."""
    prompts = prompts_of()
    llm = make_llm(model_path, draft, **scenario)
    for prompt, want in zip(prompts[:2], expected[:2]):
        assert token_ids(llm, [prompt]) == [want], scenario
    assert token_ids(llm, prompts) == expected, scenario
    assert token_ids(llm, prompts) == expected, scenario  # again: prefix-cache hits
    assert llm.engine.async_scheduling is scenario.get("async_scheduling", False)
    if scenario["num_blocks"] == 40:
        assert llm.engine.scheduler.num_preemptions > 0
    else:
        assert llm.engine.block_manager.usage().num_prefix_hit_tokens > 0
    assert_draft_state_freed(llm)
    return llm


@pytest.mark.parametrize("scenario", SCENARIOS, ids=IDS)
def test_the_target_as_its_own_draft_keeps_the_output_and_has_every_draft_accepted(
    model_path, expected, scenario
):
    llm = run_scenario(model_path, model_path, scenario, expected)
    totals = llm.engine.scheduler.speculator.totals
    assert totals.num_drafts > 10
    assert totals.num_accepted_tokens == totals.num_draft_tokens  # the plumbing is exact


def test_the_draft_runs_on_the_targets_attention_backend_torch_too(model_path, expected):
    scenario = {"num_blocks": 256, "attention_backend": "torch"}
    llm = run_scenario(model_path, model_path, scenario, expected)
    speculator = llm.engine.scheduler.speculator
    assert speculator.proposer.runner.backend.name == llm.engine.runner.backend.name == "torch"
    assert 0 < speculator.totals.num_accepted_tokens == speculator.totals.num_draft_tokens


@pytest.mark.parametrize("scenario", SCENARIOS, ids=IDS)
def test_another_draft_keeps_the_output_with_some_drafts_rejected(
    model_path, perturbed_path, unrelated_path, expected, scenario
):
    llm = run_scenario(model_path, perturbed_path, scenario, expected)
    totals = llm.engine.scheduler.speculator.totals
    assert 0 < totals.num_accepted_tokens < totals.num_draft_tokens  # rollbacks happened
    llm = run_scenario(model_path, unrelated_path, scenario, expected)
    totals = llm.engine.scheduler.speculator.totals
    assert totals.num_drafts > 0
    assert totals.num_accepted_tokens < totals.num_draft_tokens
    if scenario.get("async_scheduling"):  # misses back off: plain decodes, pipelined
        assert llm.engine.num_overlapped_steps > 0


def test_seeded_sampling_is_the_same_token_for_token(model_path, perturbed_path):
    prompts = prompts_of()[:3]
    params = [
        SamplingParams(temperature=0.8, seed=7, max_tokens=MAX_TOKENS, ignore_eos=True),
        SamplingParams(temperature=1.0, seed=3, top_k=20, max_tokens=MAX_TOKENS, logprobs=2),
        SamplingParams(temperature=0.0, min_tokens=6, max_tokens=MAX_TOKENS, logprobs=1),
    ]

    def outputs(llm):
        return [
            (o.token_ids, o.finish_reason,
             [(lp.token_id, round(lp.logprob, 4)) for lp in o.logprobs or ()])
            for o in llm.generate(prompts, params)
        ]  # fmt: skip

    want = outputs(make_llm(model_path, num_blocks=256))
    llm = make_llm(model_path, perturbed_path, num_blocks=256)
    assert outputs(llm) == want
    assert llm.engine.scheduler.speculator.totals.num_accepted_tokens > 0


def test_counters_reconcile_with_independently_counted_steps(model_path, perturbed_path, expected):
    prompt, want = PATTERN * 4, expected[0]
    llm = make_llm(model_path, perturbed_path, num_blocks=256)
    counter = SamplingChunkCounter(llm.engine.runner)
    (output,) = llm.generate([prompt], GREEDY)
    assert output.token_ids == want
    assert_counts_reconcile(output, llm.engine.scheduler.speculator.totals,
                            counter.num_sampling_chunks)  # fmt: skip


def test_a_draft_of_another_vocabulary_or_none_at_all_is_refused_naming_draft_model(
    model_path, tmp_path
):
    other = make_tiny_checkpoint("llama", tmp_path / "other", vocab_size=640)
    with pytest.raises(InvalidParameterError) as error:
        make_llm(model_path, other, num_blocks=64)
    assert error.value.parameter == "draft_model"
    assert "640" in str(error.value)
    with pytest.raises(ModelNotFoundError) as missing:
        make_llm(model_path, tmp_path / "nowhere", num_blocks=64)
    assert missing.value.parameter == "draft_model"
