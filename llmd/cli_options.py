"""Click option groups shared by the commands that build an engine or sampling params.

`llmd generate`, `llmd serve` and `llmd bench` take the same engine flags, and the
clients take the same sampling flags, so each flag is declared once, here, without torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from llmd.batch_limits import describe_defaults
from llmd.config import ATTENTION_BACKENDS, DEVICES, DTYPES, KV_CACHE_DTYPES, POLICIES

ENGINE_OPTIONS = [
    click.option("--model", "-m", default=None, show_default="the small model shipped with llmd",
                 help="HF model directory or hub id."),
    click.option("--tokenizer", default=None, show_default="the model's",
                 help="Tokenizer directory or hub id."),
    click.option("--served-model-name", default=None, show_default="the --model value",
                 help="The model's name to clients: HTTP `model`, /v1/models, status, "
                 "metrics."),
    click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True,
                 help="Weights/activations dtype (auto: bf16 on CUDA and on CPUs with "
                 "AVX512_BF16/AMX, else fp32)."),
    click.option("--num-threads", type=int, default=None,
                 show_default="the cores llmd may use",
                 help="CPU threads of the forward pass."),
    click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True,
                 help="Where the model runs (auto: CUDA if visible)."),
    click.option("--kv-cache-dtype", type=click.Choice(KV_CACHE_DTYPES), default="auto",
                 show_default=True,
                 help="KV cache element type (auto: the model's). bfloat16 under float32 "
                 "activations halves decode attention's memory traffic (cpu backend)."),
    click.option("--block-size", type=int, default=16, show_default=True,
                 help="Tokens per KV-cache block."),
    click.option("--kv-cache-memory-gib", type=float, default=1.0, show_default=True,
                 help="KV cache size on CPU, GiB."),
    click.option("--gpu-memory-utilization", type=float, default=0.9, show_default=True,
                 help="Fraction of the GPU memory free at start-up that llmd may use."),
    click.option("--num-blocks", type=int, default=None,
                 help="Explicit number of KV blocks (overrides the memory budget)."),
    click.option("--max-model-len", type=int, default=None,
                 show_default="the model's", help="Longest prompt+output in tokens."),
    click.option("--max-num-seqs", type=int, default=None,
                 show_default=describe_defaults("max_num_seqs"),
                 help="Most requests in one step."),
    click.option("--max-num-batched-tokens", type=int, default=None,
                 show_default=describe_defaults("max_num_batched_tokens"),
                 help="Token budget per step (prefill chunks plus decodes)."),
    click.option("--enable-prefix-caching/--no-enable-prefix-caching", default=True,
                 show_default=True, help="Share KV blocks of identical prompt prefixes."),
    click.option("--enable-chunked-prefill/--no-enable-chunked-prefill", default=True,
                 show_default=True, help="Split long prompts across steps."),
    click.option("--scheduling-policy", type=click.Choice(POLICIES), default="fcfs",
                 show_default=True, help="Admission order."),
    click.option("--seed", type=int, default=0, show_default=True, help="Engine seed."),
    click.option("--attention-backend", type=click.Choice(ATTENTION_BACKENDS), default="auto",
                 show_default=True, help="auto: triton on CUDA, cpu (C++ op) on CPU."),
    click.option("--enforce-eager", is_flag=True, default=False,
                 help="Disable CUDA graphs for decode steps."),
    click.option("--prepack-weights/--no-prepack-weights", default=True, show_default=True,
                 help="On CPU, pack linear weights once for oneDNN's GEMM (faster at "
                 "decode's batch sizes)."),
    click.option("--async-scheduling/--no-async-scheduling", default=None,
                 show_default="on for CUDA, off on CPU",
                 help="Prepare the next step while the device runs this one."),
]  # fmt: skip

ENGINE_KEYS = (
    "model", "tokenizer", "served_model_name", "dtype", "num_threads", "device",
    "kv_cache_dtype", "block_size",
    "kv_cache_memory_gib",
    "gpu_memory_utilization", "num_blocks", "max_model_len", "max_num_seqs",
    "max_num_batched_tokens", "enable_prefix_caching", "enable_chunked_prefill",
    "scheduling_policy", "seed", "attention_backend", "enforce_eager", "async_scheduling",
    "prepack_weights",
)  # fmt: skip

SAMPLING_OPTIONS = [
    click.option("--max-tokens", type=int, default=128, show_default=True,
                 help="Most tokens to generate per prompt."),
    click.option("--min-tokens", type=int, default=0, show_default=True,
                 help="Suppress EOS/stop tokens until this many are generated."),
    click.option("--temperature", "-t", type=float, default=0.0, show_default=True,
                 help="Sampling temperature (0: greedy)."),
    click.option("--top-k", type=int, default=0, show_default=True,
                 help="Keep the k most likely tokens (0: off)."),
    click.option("--top-p", type=float, default=1.0, show_default=True,
                 help="Nucleus sampling mass (1: off)."),
    click.option("--min-p", type=float, default=0.0, show_default=True,
                 help="Drop tokens below min_p x the top probability (0: off)."),
    click.option("--sampling-seed", type=int, default=None,
                 help="Per-request seed for reproducible sampling."),
    click.option("--repetition-penalty", type=float, default=1.0, show_default=True,
                 help="Penalize tokens already in prompt or output (1: off)."),
    click.option("--presence-penalty", type=float, default=0.0, show_default=True,
                 help="Penalize tokens present in the output."),
    click.option("--frequency-penalty", type=float, default=0.0, show_default=True,
                 help="Penalize tokens by their count in the output."),
    click.option("--stop", multiple=True, help="Stop string (repeatable)."),
    click.option("--stop-token-id", "stop_token_ids", type=int, multiple=True,
                 help="Stop token id (repeatable)."),
    click.option("--ignore-eos", is_flag=True, default=False,
                 help="Keep generating past EOS."),
    click.option("--logprobs", type=int, default=None,
                 help="Report the sampled token's logprob and the top-N alternatives."),
]  # fmt: skip


def apply_options(options: list[Callable]) -> Callable:
    """Decorate a click command with a list of options, in order."""

    def decorate(function: Callable) -> Callable:
        for option in reversed(options):
            function = option(function)
        return function

    return decorate


def pop_engine_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Remove the engine flags from a command's kwargs and return them as EngineConfig kwargs."""
    return {key: kwargs.pop(key) for key in ENGINE_KEYS if key in kwargs}


def pop_sampling_params(kwargs: dict[str, Any]):
    """Remove the sampling flags from a command's kwargs and build SamplingParams."""
    from llmd.sampling_params import SamplingParams

    return SamplingParams(
        max_tokens=kwargs.pop("max_tokens"),
        min_tokens=kwargs.pop("min_tokens"),
        temperature=kwargs.pop("temperature"),
        top_k=kwargs.pop("top_k"),
        top_p=kwargs.pop("top_p"),
        min_p=kwargs.pop("min_p"),
        seed=kwargs.pop("sampling_seed"),
        repetition_penalty=kwargs.pop("repetition_penalty"),
        presence_penalty=kwargs.pop("presence_penalty"),
        frequency_penalty=kwargs.pop("frequency_penalty"),
        stop=tuple(kwargs.pop("stop")),
        stop_token_ids=tuple(kwargs.pop("stop_token_ids")),
        ignore_eos=kwargs.pop("ignore_eos"),
        logprobs=kwargs.pop("logprobs"),
    )
