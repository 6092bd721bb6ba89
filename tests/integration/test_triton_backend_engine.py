"""The Triton attention backend inside the engine matches HF greedy output (interpreted on CPU).

Short on purpose: the interpreter is slow, and the kernels have their own tolerance tests.
"""

from __future__ import annotations

import pytest
import torch

from llmd import LLM, SamplingParams

pytest.importorskip("triton")


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="interpreter mode is off on CUDA machines; see tests/runner"
)
def test_triton_backend_greedy_matches_hf(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    prompts = [[5, 17, 33, 2, 90, 41, 7], [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]]
    hf_model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    expected = []
    with torch.no_grad():
        for prompt in prompts:
            output = hf_model.generate(
                torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                max_new_tokens=4, do_sample=False, eos_token_id=None, pad_token_id=0,
            )  # fmt: skip
            expected.append(output[0, len(prompt) :].tolist())
    # Block size 4 with a budget of 6 tokens: several blocks, chunked prefill over a
    # cached prefix, and mixed decode + prefill steps all go through the Triton kernels.
    llm = LLM(
        str(tiny_model_dir), device="cpu", attention_backend="triton", num_blocks=32, block_size=4,
        max_num_batched_tokens=6,
    )  # fmt: skip
    assert llm.engine.runner.backend.name == "triton"
    params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    assert [out.token_ids for out in llm.generate(prompts, params)] == expected


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="interpreter mode is off on CUDA machines; see tests/runner"
)
def test_triton_backend_verifies_drafts_with_the_same_greedy_output(tiny_model_dir):
    """Verify chunks (a decode plus drafts: several query tokens over a cached context)."""
    from tests.oracle_proposer import OracleProposer

    prompts = [[5, 17, 33, 2, 90, 41, 7], [8, 9, 10, 11, 12, 13]]
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    kwargs = dict(device="cpu", attention_backend="triton", num_blocks=32, block_size=4)
    want = [out.token_ids for out in LLM(str(tiny_model_dir), **kwargs).generate(prompts, params)]
    llm = LLM(str(tiny_model_dir), speculative_method="ngram", num_speculative_tokens=3, **kwargs)
    speculator = llm.engine.scheduler.speculator
    speculator.proposer = OracleProposer(prompts, want, period=3)
    assert [out.token_ids for out in llm.generate(prompts, params)] == want
    assert 0 < speculator.totals.num_accepted_tokens < speculator.totals.num_draft_tokens


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="interpreter mode is off on CUDA machines; see tests/runner"
)
def test_an_fp8_kv_cache_on_the_triton_backend_follows_hf_under_the_bf16_rule(tiny_model_dir):
    """kv_cache_dtype=fp8 (e4m3, scales 1.0) through the Triton kernels, with chunked
    prefill over an fp8 prefix: greedy tokens equal HF float32's (which the fp32-cache
    run above matches exactly) except at near-ties, by the rule the CPU fp8 test uses;
    and the same memory holds 4x the blocks of the fp32 cache."""
    from transformers import AutoModelForCausalLM

    from tests.integration.test_greedy_equivalence import check_bf16_tokens

    prompts = [[5, 17, 33, 2, 90, 41, 7], [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]]
    hf_model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    kwargs = dict(device="cpu", dtype="float32", attention_backend="triton", block_size=4)
    llm = LLM(
        str(tiny_model_dir), num_blocks=32, max_num_batched_tokens=6, kv_cache_dtype="fp8",
        **kwargs,
    )  # fmt: skip
    caches = [cache for pair in llm.engine.runner.kv_caches for cache in pair]
    assert caches and all(cache.dtype == torch.float8_e4m3fn for cache in caches)
    params = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
    got = [out.token_ids for out in llm.generate(prompts, params)]
    for prompt, got_ids in zip(prompts, got, strict=True):
        with torch.no_grad():
            output = hf_model.generate(
                torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                max_new_tokens=5, do_sample=False, eos_token_id=None, pad_token_id=0,
                output_logits=True, return_dict_in_generate=True,
            )  # fmt: skip
        want_ids = output.sequences[0, len(prompt) :].tolist()
        hf_logits = torch.cat(output.logits).float()  # [5, vocab]
        check_bf16_tokens(got_ids, want_ids, hf_logits, lambda step, logits=hf_logits: logits[step])

    budget = dict(kv_cache_memory_gib=0.01, **kwargs)
    full = LLM(str(tiny_model_dir), **budget)
    fp8 = LLM(str(tiny_model_dir), kv_cache_dtype="fp8", **budget)
    ratio = fp8.engine.runner.num_blocks / full.engine.runner.num_blocks
    assert ratio == pytest.approx(4, rel=0.01)
