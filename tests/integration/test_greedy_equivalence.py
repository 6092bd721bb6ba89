"""Greedy token ids equal HF transformers' generate on tiny random checkpoints.

Every scheduling path must leave the math untouched: each request alone, all batched,
chunked prefill under a tiny token budget, prefix-cache hits and preemption by a tiny pool,
on every CPU attention backend (the C++ op and the torch reference), each with async
scheduling off and on (on CPU too: the same code path as on CUDA). In bfloat16, llmd is
compared with HF in bfloat16 under a written tolerance rule (see `check_bf16_tokens`).
"""

from __future__ import annotations

import math

import pytest
import torch

from llmd import LLM, SamplingParams
from tests.tiny_model import make_tiny_model

ARCHS = ["llama", "mistral", "qwen2", "qwen3"]
BACKENDS = ["cpu", "torch"]
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


@pytest.fixture(params=BACKENDS)
def backend(request):
    """The attention backend every LLM of a test runs on."""
    return request.param


GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)


def _token_ids(llm: LLM, prompts) -> list[list[int]]:
    return [output.token_ids for output in llm.generate(prompts, GREEDY)]


def test_each_request_alone(arch_case, backend, async_scheduling):
    path, prompts, expected = arch_case
    llm = LLM(
        str(path), device="cpu", num_blocks=64, block_size=4, enable_prefix_caching=False,
        attention_backend=backend, async_scheduling=async_scheduling,
    )  # fmt: skip
    for prompt, want in zip(prompts, expected):
        assert _token_ids(llm, [prompt]) == [want]


def test_all_batched_with_prefix_cache(arch_case, backend, async_scheduling):
    path, prompts, expected = arch_case
    llm = LLM(str(path), device="cpu", num_blocks=256, block_size=4, attention_backend=backend,
              async_scheduling=async_scheduling)  # fmt: skip
    assert _token_ids(llm, prompts) == expected
    # Run again: now the prompts hit the prefix cache and must still match exactly.
    assert _token_ids(llm, prompts) == expected
    usage = llm.engine.block_manager.usage()
    assert usage.num_prefix_hit_tokens > 0


def test_chunked_prefill_small_budget(arch_case, backend, async_scheduling):
    path, prompts, expected = arch_case
    llm = LLM(
        str(path), device="cpu", num_blocks=256, block_size=4, max_num_batched_tokens=7,
        attention_backend=backend, async_scheduling=async_scheduling,
    )  # fmt: skip
    assert _token_ids(llm, prompts) == expected


def test_preemption_tiny_pool(arch_case, backend, async_scheduling):
    path, prompts, expected = arch_case
    # 40 blocks of 4 tokens = 160 slots for ~260 tokens of concurrent demand.
    llm = LLM(
        str(path), device="cpu", num_blocks=40, block_size=4, max_num_batched_tokens=32,
        attention_backend=backend, async_scheduling=async_scheduling,
    )  # fmt: skip
    assert _token_ids(llm, prompts) == expected
    assert llm.engine.scheduler.num_preemptions > 0
    assert llm.engine.async_scheduling is async_scheduling


def bf16_ulp(value: float) -> float:
    """Spacing of bfloat16 numbers at `value` (8 significant bits)."""
    _, exponent = math.frexp(abs(value) or 1.0)  # abs(value) = m * 2**exponent, 0.5 <= m < 1
    return 2.0 ** (exponent - 8)


def check_bf16_tokens(got: list[int], want: list[int], hf_logits: torch.Tensor) -> None:
    """Equal greedy tokens, except where HF's top two logits are within bf16 resolution.

    The rule: a divergence is allowed only at a step where HF's top-2 logits are at most
    two bf16 steps apart (gap <= 2 ulp at the top logit), i.e. equal up to the rounding
    of HF's own bf16 arithmetic (HF's bf16 SDPA rounds attention probabilities to bf16;
    llmd's CPU op keeps them in fp32). Tokens after an allowed divergence are not
    compared, since the two runs then continue from different prefixes.

    hf_logits: [num_generated, vocab] float32 copies of HF's bf16 logits, one per step.
    """
    for step, (got_id, want_id) in enumerate(zip(got, want, strict=True)):
        if got_id == want_id:
            continue
        top2 = hf_logits[step].topk(2).values
        gap, tolerance = float(top2[0] - top2[1]), 2 * bf16_ulp(float(top2[0]))
        assert gap <= tolerance, (
            f"step {step}: llmd chose {got_id}, HF {want_id} with a top-2 logit gap of "
            f"{gap:.3g} > bf16 resolution {tolerance:.3g}"
        )
        return


def _check_against_hf(path, hf_dtype: torch.dtype, seed: int, **llm_kwargs) -> LLM:
    """llmd's greedy tokens on seeded prompts, held to the bf16 rule against HF in `hf_dtype`."""
    from transformers import AutoModelForCausalLM

    hf_model = AutoModelForCausalLM.from_pretrained(path, dtype=hf_dtype).eval()
    generator = torch.Generator().manual_seed(seed)
    prompts = [
        torch.randint(3, hf_model.config.vocab_size, (n,), generator=generator).tolist()
        for n in PROMPT_LENGTHS
    ]
    llm = LLM(
        str(path), device="cpu", num_blocks=256, block_size=4, max_num_batched_tokens=32,
        **llm_kwargs,
    )  # fmt: skip
    got = _token_ids(llm, prompts)
    for prompt, got_ids in zip(prompts, got, strict=True):
        with torch.no_grad():
            output = hf_model.generate(
                torch.tensor([prompt]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                max_new_tokens=MAX_TOKENS, do_sample=False, eos_token_id=None,
                pad_token_id=0, output_logits=True, return_dict_in_generate=True,
            )  # fmt: skip
        want_ids = output.sequences[0, len(prompt) :].tolist()
        hf_logits = torch.cat(output.logits).float()  # [MAX_TOKENS, vocab]
        check_bf16_tokens(got_ids, want_ids, hf_logits)
    return llm


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_bfloat16_matches_hf_bfloat16(arch, backend, tmp_path):
    path = make_tiny_model(tmp_path, arch)
    _check_against_hf(path, torch.bfloat16, 2, dtype="bfloat16", attention_backend=backend)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_a_bfloat16_kv_cache_under_float32_matches_hf_float32(arch, tmp_path):
    """kv_cache_dtype=bfloat16 (cpu backend): K/V rounded to bf16, everything else fp32;
    held to the same written bf16 rule against HF in float32."""
    path = make_tiny_model(tmp_path, arch)
    llm = _check_against_hf(
        path, torch.float32, 3, dtype="float32", kv_cache_dtype="bfloat16",
        attention_backend="cpu",
    )  # fmt: skip
    caches = [cache for pair in llm.engine.runner.kv_caches for cache in pair]
    assert caches and all(cache.dtype == torch.bfloat16 for cache in caches)


def test_bf16_rule_rejects_a_clear_divergence():
    assert bf16_ulp(2.5) == 2.0**-6 and bf16_ulp(1.0) == 2.0**-7
    with pytest.raises(AssertionError, match="top-2 logit gap"):
        check_bf16_tokens([1], [2], torch.tensor([[0.0, 2.0, 2.0625]]))  # 4 ulp apart
    check_bf16_tokens([1], [2], torch.tensor([[0.0, 2.0, 2.03125]]))  # 2 ulp: allowed
