"""The benchmark checkpoints (random weights, real model shapes) and the seeded workload.

Shared by the offline benchmark and the GPU check script, so that every figure is measured
on the same shapes and the same heterogeneous requests.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

SMOLLM2_135M_SHAPE = {
    "hidden_size": 576,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "intermediate_size": 1536,
    "vocab_size": 49152,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
    "rope_theta": 100000.0,
    "rms_norm_eps": 1e-5,
}
QWEN3_0_6B_SHAPE = {
    "hidden_size": 1024,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 3072,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": True,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
}
QWEN3_MOE_64E_SHAPE = {
    # Qwen3-30B-A3B's ratios at half its width and 4 of its 48 layers: 64 experts, top-8.
    "hidden_size": 1024,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "num_experts": 64,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 384,
    "intermediate_size": 3072,
    "norm_topk_prob": True,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
}
SHAPES = {
    # name: (architecture, config fields, dtype the checkpoint is saved in)
    "smollm2-135m": ("llama", SMOLLM2_135M_SHAPE, torch.float32),
    "qwen3-0.6b": ("qwen3", QWEN3_0_6B_SHAPE, torch.bfloat16),
    "qwen3-moe-64e": ("qwen3_moe", QWEN3_MOE_64E_SHAPE, torch.bfloat16),
}


def make_checkpoint(
    path: Path,
    shape: dict,
    arch: str = "llama",
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
) -> Path:
    """Save a random-weight checkpoint of the given shape (built on `device`, saved as dtype)."""
    import transformers

    config_class, model_class = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "qwen3_moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM),
    }[arch]
    torch.manual_seed(0)
    config = config_class(
        **shape, architectures=[model_class.__name__], eos_token_id=0, bos_token_id=1
    )
    with torch.device(device):
        model = model_class(config)
    model.to(dtype).save_pretrained(path)
    return path


def make_workload(num_requests: int, vocab_size: int, seed: int, max_prompt: int, max_output: int):
    """Seeded (prompt_token_ids, num_output_tokens) pairs with heterogeneous lengths."""
    rng = random.Random(seed)
    return [
        (
            [rng.randrange(2, vocab_size) for _ in range(rng.randint(16, max_prompt))],
            rng.randint(8, max_output),
        )
        for _ in range(num_requests)
    ]
