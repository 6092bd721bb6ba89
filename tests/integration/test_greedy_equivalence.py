"""Greedy token ids equal HF transformers' generate on tiny random checkpoints.

Every scheduling path must leave the math untouched: each request alone, all batched,
chunked prefill under a tiny token budget, prefix-cache hits and preemption by a tiny pool,
each with async scheduling off and on (on CPU too: the same code path as on CUDA).
"""

from __future__ import annotations

import pytest
import torch

from llmd import LLM, SamplingParams
from tests.tiny_model import make_tiny_model

ARCHS = ["llama", "mistral", "qwen2", "qwen3"]
PROMPT_LENGTHS = [1, 5, 17, 40, 63]
MAX_TOKENS = 10


@pytest.fixture(params=[False, True], ids=["sync", "async"])
def async_scheduling(request):
    """Whether the engine prepares step N+1 before reading step N's samples."""
    return request.param


@pytest.fixture(scope="module", params=ARCHS)
def arch_case(request, tmp_path_factory):
    """A tiny model of one architecture, its prompts and HF's greedy continuations."""
    from transformers import AutoModelForCausalLM

    path = make_tiny_model(tmp_path_factory.mktemp(request.param), request.param)
    generator = torch.Generator().manual_seed(1)
    hf_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    vocab_size = hf_model.config.vocab_size
    shared_prefix = torch.randint(3, vocab_size, (32,), generator=generator).tolist()
    prompts = [
        torch.randint(3, vocab_size, (n,), generator=generator).tolist() for n in PROMPT_LENGTHS
    ]
    prompts += [shared_prefix + [5, 6, 7], shared_prefix + [9, 10]]  # prefix-cache candidates
    expected = []
    with torch.no_grad():
        for prompt in prompts:
            output = hf_model.generate(
                torch.tensor([prompt]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                max_new_tokens=MAX_TOKENS,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
            expected.append(output[0, len(prompt) :].tolist())
    return path, prompts, expected


GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)


def _token_ids(llm: LLM, prompts) -> list[list[int]]:
    return [output.token_ids for output in llm.generate(prompts, GREEDY)]


def test_each_request_alone(arch_case, async_scheduling):
    path, prompts, expected = arch_case
    llm = LLM(str(path), device="cpu", num_blocks=64, block_size=4, enable_prefix_caching=False,
              async_scheduling=async_scheduling)  # fmt: skip
    for prompt, want in zip(prompts, expected):
        assert _token_ids(llm, [prompt]) == [want]


def test_all_batched_with_prefix_cache(arch_case, async_scheduling):
    path, prompts, expected = arch_case
    llm = LLM(str(path), device="cpu", num_blocks=256, block_size=4,
              async_scheduling=async_scheduling)  # fmt: skip
    assert _token_ids(llm, prompts) == expected
    # Run again: now the prompts hit the prefix cache and must still match exactly.
    assert _token_ids(llm, prompts) == expected
    usage = llm.engine.block_manager.usage()
    assert usage.num_prefix_hit_tokens > 0


def test_chunked_prefill_small_budget(arch_case, async_scheduling):
    path, prompts, expected = arch_case
    llm = LLM(str(path), device="cpu", num_blocks=256, block_size=4, max_num_batched_tokens=7,
              async_scheduling=async_scheduling)  # fmt: skip
    assert _token_ids(llm, prompts) == expected


def test_preemption_tiny_pool(arch_case, async_scheduling):
    path, prompts, expected = arch_case
    # 40 blocks of 4 tokens = 160 slots for ~260 tokens of concurrent demand.
    llm = LLM(str(path), device="cpu", num_blocks=40, block_size=4, max_num_batched_tokens=32,
              async_scheduling=async_scheduling)  # fmt: skip
    assert _token_ids(llm, prompts) == expected
    assert llm.engine.scheduler.num_preemptions > 0
    assert llm.engine.async_scheduling is async_scheduling
