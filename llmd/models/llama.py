"""Llama-family decoder-only models (Llama 2/3, Mistral; Qwen2/Qwen3 via flags).

One parametrized decoder serves every supported architecture, so a fix or an optimization
lands once; subclasses only say which flags (qkv bias, q/k norm) their checkpoints use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from llmd.attention.backend import AttentionBackend
from llmd.attention.metadata import AttentionMetadata
from llmd.layers.activation import GatedActivation
from llmd.layers.attention import PagedSelfAttention
from llmd.layers.norm import RMSNorm
from llmd.layers.rotary import RotaryEmbedding, read_rope_parameters
from llmd.models.weights import WeightLoader

KVCache = tuple[torch.Tensor, torch.Tensor]


def head_dim_of(hf_config: Any) -> int:
    """The per-head size: explicit `head_dim` when set, else hidden_size / num_heads."""
    head_dim = getattr(hf_config, "head_dim", None)
    return head_dim or hf_config.hidden_size // hf_config.num_attention_heads


def num_kv_heads_of(hf_config: Any) -> int:
    """Key/value heads (GQA); configs without the field use multi-head attention."""
    return getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads


class GatedMLP(nn.Module):
    """down(act(gate(x)) * up(x)) with gate and up fused into one projection."""

    def __init__(self, hidden_size: int, intermediate_size: int, hidden_act: str, bias: bool):
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias)
        self.act = GatedActivation(hidden_act)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[num_tokens, hidden_size] -> [num_tokens, hidden_size]."""
        return self.down_proj(self.act(self.gate_up_proj(hidden)))


@dataclass(frozen=True)
class LayerVariant:
    """What the supported architectures change in a decoder layer, passed down as one value
    so that the model, each layer and its attention agree on it."""

    qkv_bias: bool = False
    """q/k/v projections have a bias (Qwen2, Llama with attention_bias)."""
    o_bias: bool = False
    """The output projection has a bias (Llama with attention_bias)."""
    use_qk_norm: bool = False
    """Queries and keys get a per-head RMSNorm before rope (Qwen3)."""


class DecoderLayer(nn.Module):
    """Pre-norm attention then pre-norm MLP, each with a residual connection."""

    def __init__(
        self,
        hf_config: Any,
        attention_backend: AttentionBackend | None,
        variant: LayerVariant,
        mlp: nn.Module | None = None,
    ) -> None:
        super().__init__()
        eps = hf_config.rms_norm_eps
        self.self_attn = PagedSelfAttention(
            hidden_size=hf_config.hidden_size,
            num_heads=hf_config.num_attention_heads,
            num_kv_heads=num_kv_heads_of(hf_config),
            head_dim=head_dim_of(hf_config),
            attention_backend=attention_backend,
            qkv_bias=variant.qkv_bias,
            o_bias=variant.o_bias,
            qk_norm_eps=eps if variant.use_qk_norm else None,
        )
        self.mlp = mlp if mlp is not None else dense_mlp(hf_config)
        self.input_layernorm = RMSNorm(hf_config.hidden_size, eps)
        self.post_attention_layernorm = RMSNorm(hf_config.hidden_size, eps)

    def forward(
        self,
        hidden: torch.Tensor,  # [num_tokens, hidden_size]
        residual: torch.Tensor | None,  # [num_tokens, hidden_size]; None in the first layer
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv_cache: KVCache,
        metadata: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (MLP output, residual stream); the next layer's norm adds them."""
        if residual is None:
            residual = hidden
            hidden = self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(hidden, cos, sin, kv_cache, metadata)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual


def dense_mlp(hf_config: Any) -> GatedMLP:
    """The config's dense gated MLP (every layer of a dense model)."""
    return GatedMLP(
        hf_config.hidden_size,
        hf_config.intermediate_size,
        hf_config.hidden_act,
        bias=bool(getattr(hf_config, "mlp_bias", False)),
    )


MlpFactory = Callable[[Any, int], nn.Module]
"""(hf_config, layer index) -> the layer's MLP: how MoE models choose sparse layers."""


class DecoderModel(nn.Module):
    """Embedding, the decoder stack, the final norm and the rope tables (HF's `model.` prefix).

    Only a holder that gives the weights their checkpoint names: `LlamaForCausalLM.forward`
    runs its parts.
    """

    def __init__(
        self,
        hf_config: Any,
        attention_backend: AttentionBackend | None,
        variant: LayerVariant,
        make_mlp: MlpFactory | None = None,
    ) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(hf_config.vocab_size, hf_config.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(
                hf_config,
                attention_backend,
                variant,
                None if make_mlp is None else make_mlp(hf_config, layer_index),
            )
            for layer_index in range(hf_config.num_hidden_layers)
        )
        self.norm = RMSNorm(hf_config.hidden_size, hf_config.rms_norm_eps)
        self.rotary = RotaryEmbedding(
            head_dim_of(hf_config),
            hf_config.max_position_embeddings,
            read_rope_parameters(hf_config),
        )


class LlamaForCausalLM(nn.Module):
    """Llama checkpoints; also the base of every other supported architecture."""

    use_qk_norm = False
    """Whether queries and keys get a per-head RMSNorm before rope (Qwen3)."""

    def __init__(self, hf_config: Any, attention_backend: AttentionBackend | None) -> None:
        super().__init__()
        self.config = hf_config
        qkv_bias, o_bias = self.projection_biases(hf_config)
        variant = LayerVariant(qkv_bias, o_bias, self.use_qk_norm)
        self.model = DecoderModel(hf_config, attention_backend, variant, self.mlp_factory())
        self.lm_head = nn.Linear(hf_config.hidden_size, hf_config.vocab_size, bias=False)
        self.is_tied = bool(getattr(hf_config, "tie_word_embeddings", False))
        if self.is_tied:
            self.tie_embeddings()

    def mlp_factory(self) -> MlpFactory | None:
        """How each layer's MLP is built; None: the dense MLP everywhere (MoE models override)."""
        return None

    @classmethod
    def projection_biases(cls, hf_config: Any) -> tuple[bool, bool]:
        """(q/k/v have a bias, o_proj has a bias): both follow `attention_bias` in Llama."""
        has_bias = bool(getattr(hf_config, "attention_bias", False))
        return has_bias, has_bias

    def tie_embeddings(self) -> None:
        """Make lm_head share embed_tokens' weight (tied checkpoints store it once)."""
        self.lm_head.weight = self.model.embed_tokens.weight

    def forward(
        self,
        input_ids: torch.Tensor,  # [num_tokens] int64
        positions: torch.Tensor,  # [num_tokens] int64
        kv_caches: list[KVCache],
        metadata: AttentionMetadata,
    ) -> torch.Tensor:  # [num_tokens, hidden_size]
        """Run every layer over the flat batch and return final-normed hidden states."""
        decoder = self.model
        hidden = decoder.embed_tokens(input_ids)
        cos, sin = decoder.rotary.cos_sin(positions, hidden.dtype)
        residual = None
        for layer, kv_cache in zip(decoder.layers, kv_caches, strict=True):
            hidden, residual = layer(hidden, residual, cos, sin, kv_cache, metadata)
        hidden, _ = decoder.norm(hidden, residual)
        return hidden

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[n, hidden_size] -> [n, vocab_size] float32 logits."""
        return self.lm_head(hidden).float()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy HF-named tensors in, fusing q/k/v and gate/up; raise on any mismatch."""
        loader = WeightLoader(self)
        for name, tensor in weights:
            loader.load(name, tensor)
        if "lm_head.weight" not in loader.loaded_names and not self.is_tied:
            # Some checkpoints omit lm_head without setting tie_word_embeddings.
            self.is_tied = True
        if self.is_tied:
            self.tie_embeddings()
        loader.check_complete()


class MistralForCausalLM(LlamaForCausalLM):
    """Mistral checkpoints: the Llama architecture.

    Mistral's sliding window only changes results for contexts longer than the window;
    `llmd.models.loader.model_shape` reports it so the engine caps max_model_len there.
    """
