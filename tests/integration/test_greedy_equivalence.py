"""Greedy token ids equal HF transformers' generate on tiny random checkpoints.

Every scheduling path must leave the math untouched: each request alone, all batched,
chunked prefill under a tiny token budget, prefix-cache hits and preemption by a tiny pool,
on every CPU attention backend (the C++ op and the torch reference), each with async
scheduling off and on (on CPU too: the same code path as on CUDA). In bfloat16, llmd is
compared with HF in bfloat16 under a written tolerance rule (see `check_bf16_tokens`).
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable

import pytest
import torch

from llmd import LLM, SamplingParams
from tests.tiny_model import make_tiny_model

ARCHS = ["llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral", "qwen2_moe"]
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


def fp32_llm(path, backend: str, **kwargs) -> LLM:
    """An fp32 engine on `backend`, checked to really run it (the cpu backend falls back to
    torch when its C++ op cannot be built, which would halve what this suite covers)."""
    llm = LLM(str(path), device="cpu", dtype="float32", attention_backend=backend, **kwargs)
    assert llm.engine.runner.backend.name == backend
    assert llm.engine.dtype == "float32"
    return llm


def test_each_request_alone(arch_case, backend, async_scheduling):
    path, prompts, expected = arch_case
    llm = fp32_llm(path, backend, num_blocks=64, block_size=4, enable_prefix_caching=False,
                   async_scheduling=async_scheduling)  # fmt: skip
    for prompt, want in zip(prompts, expected):
        assert _token_ids(llm, [prompt]) == [want]


def test_all_batched_with_prefix_cache(arch_case, backend, async_scheduling):
    path, prompts, expected = arch_case
    llm = fp32_llm(path, backend, num_blocks=256, block_size=4, async_scheduling=async_scheduling)
    assert _token_ids(llm, prompts) == expected
    # Run again: now the prompts hit the prefix cache and must still match exactly.
    assert _token_ids(llm, prompts) == expected
    usage = llm.engine.block_manager.usage()
    assert usage.num_prefix_hit_tokens > 0


def test_chunked_prefill_small_budget(arch_case, backend, async_scheduling):
    path, prompts, expected = arch_case
    llm = fp32_llm(path, backend, num_blocks=256, block_size=4, max_num_batched_tokens=7,
                   async_scheduling=async_scheduling)  # fmt: skip
    assert _token_ids(llm, prompts) == expected


def test_preemption_tiny_pool(arch_case, backend, async_scheduling):
    path, prompts, expected = arch_case
    # 40 blocks of 4 tokens = 160 slots for ~260 tokens of concurrent demand.
    llm = fp32_llm(path, backend, num_blocks=40, block_size=4, max_num_batched_tokens=32,
                   async_scheduling=async_scheduling)  # fmt: skip
    assert _token_ids(llm, prompts) == expected
    assert llm.engine.scheduler.num_preemptions > 0
    assert llm.engine.async_scheduling is async_scheduling


def bf16_ulp(value: float) -> float:
    """Spacing of bfloat16 numbers at `value` (8 significant bits)."""
    _, exponent = math.frexp(abs(value) or 1.0)  # abs(value) = m * 2**exponent, 0.5 <= m < 1
    return 2.0 ** (exponent - 8)


def check_bf16_tokens(
    got: list[int],
    want: list[int],
    hf_logits: torch.Tensor,
    fp32_logits_at: Callable[[int], torch.Tensor],
) -> None:
    """Equal greedy tokens, except at a tie within bf16 resolution.

    The rule: a divergence is allowed only at a step where the two chosen tokens' logits
    are at most two bf16 steps apart (2 ulp at the top logit) in HF's own logits or in an
    fp32 reference's at the same prefix, i.e. equal up to bf16 rounding. HF's bf16 SDPA
    rounds attention probabilities to bf16 and llmd's CPU op keeps them in fp32, so at a
    near-tie either may pick either token; the fp32 reference tells a near-tie from an
    error. Tokens after an allowed divergence are not compared, since the two runs then
    continue from different prefixes.

    hf_logits: [num_generated, vocab] float32 copies of HF's logits, one per step.
    fp32_logits_at(step): [vocab] fp32 reference logits after the prompt and want[:step].
    """
    for step, (got_id, want_id) in enumerate(zip(got, want, strict=True)):
        if got_id == want_id:
            continue
        gaps = []
        for logits in (hf_logits[step], fp32_logits_at(step)):
            gap = float(logits[want_id] - logits[got_id])
            tolerance = 2 * bf16_ulp(float(logits.max()))
            if abs(gap) <= tolerance:
                return
            gaps.append(f"{gap:.3g} > {tolerance:.3g}")
        raise AssertionError(
            f"step {step}: llmd chose {got_id}, HF {want_id}: logit gaps (HF, fp32) "
            f"{', '.join(gaps)} exceed bf16 resolution"
        )


def _check_against_hf(
    path, hf_dtype: torch.dtype, seed: int, hf_attention: str = "sdpa", **llm_kwargs
) -> LLM:
    """llmd's greedy tokens on seeded prompts, held to the bf16 rule against HF in `hf_dtype`
    (and its fp32 reference) running the attention implementation `hf_attention`."""
    from transformers import AutoModelForCausalLM

    hf_model = AutoModelForCausalLM.from_pretrained(
        path, dtype=hf_dtype, attn_implementation=hf_attention
    ).eval()
    reference = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation=hf_attention
    ).eval()
    generator = torch.Generator().manual_seed(seed)
    prompts = [
        torch.randint(3, hf_model.config.vocab_size, (n,), generator=generator).tolist()
        for n in PROMPT_LENGTHS
    ]
    llm = LLM(
        str(path), device="cpu", num_blocks=256, block_size=4, max_num_batched_tokens=32,
        **llm_kwargs,
    )  # fmt: skip
    assert llm.engine.runner.backend.name == llm_kwargs.get("attention_backend", "cpu")
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

        def fp32_logits_at(step: int, prompt=prompt, want_ids=want_ids) -> torch.Tensor:
            with torch.no_grad():
                prefix = torch.tensor([prompt + want_ids[:step]])  # [1, len]
                return reference(prefix).logits[0, -1].float()  # [vocab]

        check_bf16_tokens(got_ids, want_ids, hf_logits, fp32_logits_at)
    return llm


@pytest.mark.parametrize("arch", ["llama", "qwen3", "qwen3_moe", "mixtral"])
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


def register_fp8_kv_attention() -> str:
    """The name of HF's sdpa attention on keys and values rounded to e4m3 with scale 1.0
    (saturating at 448, as llmd's fp8 cache stores them): the reference of an fp8 cache."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def fp8_kv_sdpa(module, query, key, value, *args, **kwargs):
        key, value = (
            tensor.clamp(-448, 448).to(torch.float8_e4m3fn).to(tensor.dtype)
            for tensor in (key, value)
        )
        return sdpa_attention_forward(module, query, key, value, *args, **kwargs)

    AttentionInterface.register("llmd_fp8_kv_sdpa", fp8_kv_sdpa)
    return "llmd_fp8_kv_sdpa"


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("model_dtype", [torch.float32, torch.bfloat16])
def test_an_fp8_kv_cache_matches_hf_under_the_bf16_rule(model_dtype, arch, tmp_path):
    """kv_cache_dtype=fp8 (e4m3, scales 1.0; cpu backend): K/V quantized to 3 mantissa
    bits, everything else in the model's dtype; greedy tokens held to the bf16 rule against
    HF in that dtype with its K/V rounded the same way (unrounded HF parted from Qwen3 in
    bf16 at a 0.15 logit gap, which rounded HF reproduced token for token), and the cache
    holds 4x (fp32) or 2x (bf16) the blocks."""
    path = make_tiny_model(tmp_path, arch)
    name = str(model_dtype).removeprefix("torch.")
    llm = _check_against_hf(
        path, model_dtype, 5, hf_attention=register_fp8_kv_attention(), dtype=name,
        kv_cache_dtype="fp8", attention_backend="cpu",
    )  # fmt: skip
    caches = [cache for pair in llm.engine.runner.kv_caches for cache in pair]
    assert caches and all(cache.dtype == torch.float8_e4m3fn for cache in caches)
    full = LLM(str(path), device="cpu", dtype=name, kv_cache_memory_gib=0.01)
    fp8 = LLM(str(path), device="cpu", dtype=name, kv_cache_memory_gib=0.01, kv_cache_dtype="fp8")
    ratio = fp8.engine.runner.num_blocks / full.engine.runner.num_blocks
    assert ratio == pytest.approx(model_dtype.itemsize, rel=0.01)


def test_the_auto_dtype_matches_hf_in_the_dtype_it_picks(tmp_path):
    """What a user gets by default: bf16 where the CPU has native bf16 math (held to the
    bf16 rule against HF bf16), fp32 elsewhere (held to the same rule against HF fp32)."""
    path = make_tiny_model(tmp_path, "llama")
    llm = _check_against_hf(path, _auto_cpu_dtype(), 4)
    assert llm.engine.dtype == str(_auto_cpu_dtype()).removeprefix("torch.")


def _auto_cpu_dtype() -> torch.dtype:
    from llmd.runner.device import resolve_dtype

    return resolve_dtype("auto", torch.device("cpu"))


def test_bf16_rule_rejects_a_clear_divergence():
    assert bf16_ulp(2.5) == 2.0**-6 and bf16_ulp(1.0) == 2.0**-7
    far = torch.tensor([0.0, 2.0, 2.0625])  # tokens 1 and 2: 4 ulp apart
    near = torch.tensor([0.0, 2.0, 2.03125])  # 2 ulp: a tie in bf16
    with pytest.raises(AssertionError, match="exceed bf16 resolution"):
        check_bf16_tokens([1], [2], far[None], lambda step: far)
    check_bf16_tokens([1], [2], near[None], lambda step: far)  # HF's own logits tie
    check_bf16_tokens([1], [2], far[None], lambda step: near)  # the fp32 reference ties
    check_bf16_tokens([7, 1, 5], [7, 2, 6], torch.stack([far, near, far]), lambda step: far)
    with pytest.raises(AssertionError, match="step 1"):
        check_bf16_tokens([7, 1], [7, 2], torch.stack([near, far]), lambda step: far)


def test_checkpoint_kv_scales_apply_to_an_fp8_cache_only(tmp_path):
    """A checkpoint's KV scales change what an fp8 cache stores (the output moves with
    them) and leave a bf16 or fp32 cache's output exactly as without them."""
    from safetensors.torch import load_file, save_file

    path = make_tiny_model(tmp_path / "plain", "llama")
    scaled = tmp_path / "scaled"
    shutil.copytree(path, scaled)
    tensors = load_file(scaled / "model.safetensors")
    num_layers = json.loads((scaled / "config.json").read_text())["num_hidden_layers"]
    for layer in range(num_layers):
        tensors[f"model.layers.{layer}.self_attn.k_scale"] = torch.tensor(0.01)
        tensors[f"model.layers.{layer}.self_attn.v_scale"] = torch.tensor(0.01)
    save_file(tensors, scaled / "model.safetensors")
    prompts = [[5, 9, 14, 3, 8, 21, 30], [7, 7, 2]]

    def texts(model_path, **kwargs):
        llm = LLM(str(model_path), device="cpu", dtype="float32", attention_backend="cpu", **kwargs)
        logprobs = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, logprobs=0)
        outputs = llm.generate(prompts, logprobs)
        return [[entry.logprob for entry in output.logprobs] for output in outputs]

    assert texts(scaled) == texts(path)  # fp32 cache: the scales are not used
    plain_fp8, scaled_fp8 = texts(path, kv_cache_dtype="fp8"), texts(scaled, kv_cache_dtype="fp8")
    assert plain_fp8 != scaled_fp8  # 1/0.01 = 100x larger stored values: other roundings
