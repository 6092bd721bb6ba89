"""llmd's models against HF transformers on tiny random checkpoints, through the paged cache.

Each case runs prefill, decode and chunked prefill in mixed flat batches over a NaN-filled
cache with ragged blocks, which is exactly what the runner does, and compares every logit.
"""

from __future__ import annotations

import pytest
import torch
import transformers

from llmd.attention.reference import build_metadata
from llmd.attention.torch_backend import TorchAttentionBackend
from llmd.models.loader import load_hf_config, load_model, model_shape
from tests.checkpoints import make_tiny_checkpoint

BLOCK_SIZE = 4
NUM_BLOCKS = 24
ATOL = 1e-4

LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 4.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 128,
}

CASES = {
    "llama": ("llama", {}),
    "mistral": ("mistral", {}),
    "qwen2": ("qwen2", {}),
    "qwen3": ("qwen3", {}),
    "qwen3_moe": ("qwen3_moe", {}),
    "qwen3_moe-no-renormalize": ("qwen3_moe", {"norm_topk_prob": False, "mlp_only_layers": []}),
    "mixtral": ("mixtral", {}),
    "qwen2_moe": ("qwen2_moe", {}),
    "llama-tied": ("llama", {"tie_word_embeddings": True}),
    "qwen3-tied": ("qwen3", {"tie_word_embeddings": True}),
    "llama-llama3-rope": ("llama", {"rope_scaling": LLAMA3_SCALING, "rope_theta": 500000.0}),
    "llama-linear-rope": ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
}


pytestmark = pytest.mark.usefixtures("single_thread")


class PagedModel:
    """Drives an llmd model step by step over its own paged cache, like a tiny runner."""

    def __init__(self, path, generator: torch.Generator) -> None:
        hf_config = load_hf_config(path)
        self.model = load_model(
            path, hf_config, TorchAttentionBackend(), torch.float32, torch.device("cpu")
        )
        shape = model_shape(hf_config)
        cache_shape = (NUM_BLOCKS, BLOCK_SIZE, shape.num_kv_heads, shape.head_dim)
        self.kv_caches = [
            (torch.full(cache_shape, float("nan")), torch.full(cache_shape, float("nan")))
            for _ in range(shape.num_layers)
        ]
        self.generator = generator
        self.block_ids: dict[str, list[int]] = {}
        self.free_block_ids = torch.randperm(NUM_BLOCKS, generator=generator).tolist()

    def step(self, chunks: list[tuple[str, list[int], int]]) -> list[torch.Tensor]:
        """Run one batch of (sequence name, new token ids, cached length); return logits."""
        query_lens = [len(token_ids) for _, token_ids, _ in chunks]
        seq_lens = [cached + len(token_ids) for _, token_ids, cached in chunks]
        for (name, _, _), seq_len in zip(chunks, seq_lens):
            owned = self.block_ids.setdefault(name, [])
            while len(owned) * BLOCK_SIZE < seq_len:
                owned.append(self.free_block_ids.pop())
        metadata, _ = build_metadata(
            query_lens,
            seq_lens,
            BLOCK_SIZE,
            NUM_BLOCKS,
            block_ids_per_seq=[self.block_ids[name] for name, _, _ in chunks],
        )
        input_ids = torch.tensor([t for _, token_ids, _ in chunks for t in token_ids])
        positions = torch.cat(
            [torch.arange(cached, cached + len(ids)) for _, ids, cached in chunks]
        )
        with torch.no_grad():
            hidden = self.model(input_ids, positions, self.kv_caches, metadata)
            logits = self.model.compute_logits(hidden)
        assert logits.dtype == torch.float32
        return list(logits.split(query_lens))


def hf_logits(hf_model, token_ids: list[int]) -> torch.Tensor:
    """HF's logits at every position of one unpadded sequence."""
    with torch.no_grad():
        return hf_model(torch.tensor([token_ids])).logits[0]


@pytest.mark.parametrize("case", list(CASES))
def test_prefill_decode_and_chunked_prefill_match_transformers(tmp_path, case):
    arch, overrides = CASES[case]
    path = make_tiny_checkpoint(arch, tmp_path / case, **overrides)
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(
        path, attn_implementation="eager"
    ).eval()
    generator = torch.Generator().manual_seed(1)
    paged = PagedModel(path, generator)

    def random_ids(n: int) -> list[int]:
        return torch.randint(0, 512, (n,), generator=generator).tolist()

    # Lengths cross block boundaries (4), end exactly on one (8) and leave ragged tails.
    prompts = {"a": random_ids(5), "b": random_ids(11), "c": random_ids(8)}
    chunked = random_ids(13)

    # Step 1: three whole prompts plus the first chunk of a fourth.
    step1 = [(name, ids, 0) for name, ids in prompts.items()] + [("d", chunked[:6], 0)]
    for (_, token_ids, _), logits in zip(step1, paged.step(step1)):
        torch.testing.assert_close(logits, hf_logits(hf_model, token_ids), atol=ATOL, rtol=0)

    # Step 2: one decode per prompt, then the rest of the chunked prompt over its cache.
    next_ids = {name: random_ids(1) for name in prompts}
    step2 = [(name, next_ids[name], len(ids)) for name, ids in prompts.items()]
    step2.append(("d", chunked[6:], 6))
    outputs = paged.step(step2)
    for (name, _, _), logits in zip(step2[:3], outputs[:3]):
        expected = hf_logits(hf_model, prompts[name] + next_ids[name])[-1:]
        torch.testing.assert_close(logits, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(outputs[3], hf_logits(hf_model, chunked)[6:], atol=ATOL, rtol=0)


def test_tied_model_shares_embedding_and_qwen_flags(tmp_path):
    tied = make_tiny_checkpoint("llama", tmp_path / "tied", tie_word_embeddings=True)
    qwen2 = make_tiny_checkpoint("qwen2", tmp_path / "qwen2")
    qwen3 = make_tiny_checkpoint("qwen3", tmp_path / "qwen3")
    backend, cpu = TorchAttentionBackend(), torch.device("cpu")

    model = load_model(tied, load_hf_config(tied), backend, torch.float32, cpu)
    assert model.lm_head.weight is model.model.embed_tokens.weight

    model = load_model(qwen2, load_hf_config(qwen2), backend, torch.float32, cpu)
    attention = model.model.layers[0].self_attn
    assert attention.qkv_proj.bias is not None and attention.o_proj.bias is None

    model = load_model(qwen3, load_hf_config(qwen3), backend, torch.float32, cpu)
    attention = model.model.layers[0].self_attn
    assert attention.has_qk_norm and attention.head_dim == 32
    assert attention.qkv_proj.out_features == (4 + 2 * 2) * 32


def test_moe_checkpoint_problems_name_the_weight(tmp_path):
    """A missing expert slice, an expert the config does not have and a mis-shaped expert
    tensor are typed errors naming the weight, never a silent partial load."""
    from safetensors.torch import load_file, save_file

    from llmd.errors import UnsupportedModelError

    path = make_tiny_checkpoint("qwen3_moe", tmp_path / "moe")
    tensors = load_file(path / "model.safetensors")
    backend, cpu = TorchAttentionBackend(), torch.device("cpu")

    def load_with(changed: dict[str, torch.Tensor], dropped: str | None = None) -> str:
        edited = {**tensors, **changed}
        if dropped is not None:
            del edited[dropped]
        save_file(edited, path / "model.safetensors")
        with pytest.raises(UnsupportedModelError) as error:
            load_model(path, load_hf_config(path), backend, torch.float32, cpu)
        return str(error.value)

    up = "model.layers.2.mlp.experts.5.up_proj.weight"
    assert "model.layers.2.mlp.experts.gate_up_proj" in load_with({}, dropped=up)
    extra = "model.layers.0.mlp.experts.8.down_proj.weight"
    down = tensors["model.layers.0.mlp.experts.0.down_proj.weight"].clone()
    assert "names expert 8, but the config has 8 experts" in load_with({extra: down})
    assert "has shape (32, 63)" in load_with({up: tensors[up][:, :63].clone()})
