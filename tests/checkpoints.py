"""Factory of tiny random-weight HF checkpoints for model, loader and engine tests.

Tests must never download a model, so they build one with transformers itself: the same
code that produces real checkpoints, at sizes that run in milliseconds on a CPU.
"""

from __future__ import annotations

import pathlib
from typing import Any

import torch
import transformers

TINY_SIZES: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 512,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
}

ARCHITECTURES: dict[str, tuple[type, str, dict[str, Any]]] = {
    "llama": (transformers.LlamaConfig, "LlamaForCausalLM", {}),
    "mistral": (transformers.MistralConfig, "MistralForCausalLM", {"sliding_window": None}),
    "qwen2": (transformers.Qwen2Config, "Qwen2ForCausalLM", {}),
    # An explicit head_dim different from hidden_size / num_heads, as real Qwen3 models have.
    "qwen3": (transformers.Qwen3Config, "Qwen3ForCausalLM", {"head_dim": 32}),
    # Mixture of experts: 8 experts, top-2; Qwen3-MoE renormalises the chosen two and keeps
    # a dense MLP in layer 1 (mlp_only_layers), Qwen2-MoE adds its gated shared expert.
    "qwen3_moe": (
        transformers.Qwen3MoeConfig,
        "Qwen3MoeForCausalLM",
        {
            "head_dim": 32,
            "num_hidden_layers": 3,
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "norm_topk_prob": True,
            "mlp_only_layers": [1],
        },
    ),
    "mixtral": (
        transformers.MixtralConfig,
        "MixtralForCausalLM",
        {
            "sliding_window": None,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "intermediate_size": 32,
        },
    ),
    "qwen2_moe": (
        transformers.Qwen2MoeConfig,
        "Qwen2MoeForCausalLM",
        {
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 48,
            "decoder_sparse_step": 2,
        },
    ),
}

WEIGHT_STD = 0.1
"""Large enough that attention, rope and every bias visibly change the logits."""


def make_tiny_checkpoint(
    arch: str,
    path: str | pathlib.Path,
    seed: int = 0,
    max_shard_size: str | None = None,
    **overrides: Any,
) -> pathlib.Path:
    """Save a float32 random-weight checkpoint of `arch` to `path` and return the path.

    `overrides` replace config fields (e.g. tie_word_embeddings=True, rope_scaling={...});
    `max_shard_size` (e.g. "100KB") writes a sharded checkpoint with an index file.
    """
    config_class, architecture, arch_defaults = ARCHITECTURES[arch]
    config = config_class(
        **{**TINY_SIZES, **arch_defaults, **overrides}, architectures=[architecture]
    )
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator) * WEIGHT_STD
            # Norm weights around one, everything else (including biases) around zero.
            param.copy_(noise + 1.0 if "norm" in name else noise)
    path = pathlib.Path(path)
    save_kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(path, **save_kwargs)
    return path
