"""The model-side self-attention block: fused qkv projection, rope, paged attention, o_proj.

Every supported architecture shares this block; the differences (qkv bias, per-head q/k
RMSNorm, explicit head_dim) are constructor flags, and the paged-cache work is delegated to
whichever AttentionBackend the runner chose.
"""

from __future__ import annotations

import torch
from torch import nn

from llmd.attention.backend import AttentionBackend
from llmd.attention.metadata import AttentionMetadata
from llmd.layers.norm import RMSNorm
from llmd.layers.rotary import apply_rotary


class PagedSelfAttention(nn.Module):
    """Causal GQA self-attention over the paged KV cache for one decoder layer."""

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        attention_backend: AttentionBackend | None,
        qkv_bias: bool = False,
        o_bias: bool = False,
        qk_norm_eps: float | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.q_size = num_heads * head_dim
        self.kv_size = num_kv_heads * head_dim
        self.scale = head_dim**-0.5
        self.backend = attention_backend
        self.qkv_proj = nn.Linear(hidden_size, self.q_size + 2 * self.kv_size, bias=qkv_bias)
        self.o_proj = nn.Linear(self.q_size, hidden_size, bias=o_bias)
        self.has_qk_norm = qk_norm_eps is not None
        if qk_norm_eps is not None:
            self.q_norm = RMSNorm(head_dim, qk_norm_eps)
            self.k_norm = RMSNorm(head_dim, qk_norm_eps)

    def forward(
        self,
        hidden: torch.Tensor,  # [num_tokens, hidden_size]
        cos: torch.Tensor,  # [num_tokens, 1, head_dim // 2]
        sin: torch.Tensor,  # [num_tokens, 1, head_dim // 2]
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        metadata: AttentionMetadata,
    ) -> torch.Tensor:  # [num_tokens, hidden_size]
        """Project, rotate, store K/V and attend through the backend, then project out."""
        num_tokens = hidden.shape[0]
        num_qk_heads = self.num_heads + self.num_kv_heads
        qkv = self.qkv_proj(hidden)  # [num_tokens, q_size + 2 * kv_size]
        qkv = qkv.view(num_tokens, num_qk_heads + self.num_kv_heads, self.head_dim)
        if self.has_qk_norm:
            query = self.q_norm(qkv[:, : self.num_heads])  # [num_tokens, num_heads, head_dim]
            key = self.k_norm(qkv[:, self.num_heads : num_qk_heads])
            query = apply_rotary(query, cos, sin)
            key = apply_rotary(key, cos, sin)  # [num_tokens, num_kv_heads, head_dim]
        else:
            # One rotation over q and k heads together: [num_tokens, num_qk_heads, head_dim].
            query_key = apply_rotary(qkv[:, :num_qk_heads], cos, sin)
            query, key = query_key.split((self.num_heads, self.num_kv_heads), dim=1)
        value = qkv[:, num_qk_heads:]  # [num_tokens, num_kv_heads, head_dim], rows strided
        k_cache, v_cache = kv_cache
        out = self.backend.forward(query, key, value, k_cache, v_cache, metadata, self.scale)
        return self.o_proj(out.reshape(num_tokens, self.q_size))
