"""Prompt logprobs equal log_softmax of HF transformers' logits on a tiny random model.

Covered: a prompt longer than the step's token budget (chunked prefill), a second request
whose prefix would hit the cache, batching with requests that do not ask, a tiny KV pool
that preempts, and both scheduling modes.
"""

from __future__ import annotations

import pytest
import torch

from llmd import LLM, SamplingParams
from tests.scheduling_mode import MODES, mode_id
from tests.tiny_model import make_tiny_model

NUM_TOP = 3
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def model_case(tmp_path_factory):
    """A tiny llama, three prompts (two sharing a 40-token prefix) and HF's logprobs."""
    from transformers import AutoModelForCausalLM

    path = make_tiny_model(tmp_path_factory.mktemp("llama"), "llama")
    hf_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(3)
    vocab_size = hf_model.config.vocab_size
    prefix = torch.randint(3, vocab_size, (40,), generator=generator).tolist()
    prompts = [
        prefix + [5, 6, 7, 8],
        prefix + [9, 10, 11],
        torch.randint(3, vocab_size, (70,), generator=generator).tolist(),
    ]
    expected = []
    with torch.no_grad():
        for prompt in prompts:
            logits = hf_model(torch.tensor([prompt])).logits[0]  # [len, vocab]
            expected.append(torch.log_softmax(logits.float(), dim=-1))
    return path, prompts, expected


def _check(output, prompt: list[int], hf_logprobs: torch.Tensor) -> None:
    """Every entry matches HF: the actual token's logprob and rank, and the top-k."""
    entries = output.prompt_logprobs
    assert entries is not None and len(entries) == len(prompt)
    assert entries[0] is None
    for position, entry in enumerate(entries[1:]):
        row = hf_logprobs[position]  # logits at `position` predict token position + 1
        token_id = prompt[position + 1]
        assert entry.token_id == token_id
        assert abs(entry.logprob - row[token_id].item()) < TOLERANCE
        assert entry.rank == int((row > row[token_id]).sum()) + 1
        top_values, top_ids = row.topk(NUM_TOP)
        assert len(entry.top_token_ids) == NUM_TOP
        assert torch.allclose(torch.tensor(entry.top_logprobs).float(), top_values, atol=TOLERANCE)
        assert list(entry.top_token_ids)[:1] == top_ids.tolist()[:1]


@pytest.mark.parametrize("is_async", MODES, ids=mode_id)
@pytest.mark.parametrize("num_blocks", [None, 22], ids=["roomy", "preempting"])
def test_prompt_logprobs_match_hf(model_case, is_async: bool, num_blocks) -> None:
    path, prompts, expected = model_case
    options = {} if num_blocks is None else {"num_blocks": num_blocks}
    llm = LLM(
        str(path), device="cpu", dtype="float32", attention_backend="torch",
        max_num_batched_tokens=16, block_size=4, async_scheduling=is_async, **options,
    )  # fmt: skip
    asking = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, prompt_logprobs=NUM_TOP)
    plain = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    # The first prompt alone fills the cache with the shared prefix for the second.
    first = llm.generate([prompts[0]], asking)[0]
    _check(first, prompts[0], expected[0])
    outputs = llm.generate([prompts[1], prompts[2], prompts[0]], [asking, asking, plain])
    _check(outputs[0], prompts[1], expected[1])
    _check(outputs[1], prompts[2], expected[2])
    assert outputs[0].metrics.num_cached_tokens == 0  # asked: no prefix-cache hit
    assert outputs[2].prompt_logprobs is None
    assert outputs[2].metrics.num_cached_tokens > 0  # the plain one still hits
    if num_blocks is not None:
        assert sum(o.metrics.num_preemptions for o in outputs) > 0


def test_prompt_logprobs_zero_gives_only_the_actual_token(model_case) -> None:
    path, prompts, expected = model_case
    llm = LLM(str(path), device="cpu", dtype="float32", attention_backend="torch")
    params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0)
    entries = llm.generate([prompts[2]], params)[0].prompt_logprobs
    assert entries[1].top_token_ids == ()
    assert abs(entries[1].logprob - expected[2][0][prompts[2][1]].item()) < TOLERANCE


def test_prompt_logprobs_out_of_range_names_the_field() -> None:
    with pytest.raises(ValueError, match="prompt_logprobs"):
        SamplingParams(prompt_logprobs=21)
