"""The model-side self-attention block: fused qkv projection, rope, paged attention, o_proj.

Every supported architecture shares this block; the differences (qkv bias, per-head q/k
RMSNorm, explicit head_dim) are constructor flags, and the paged-cache work is delegated to
whichever AttentionBackend the runner chose. With Triton layer kernels (or the C++ CPU
ops, in float32 or bfloat16), q and k are rotated in place by one call instead of several
torch temporaries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from llmd.attention.backend import AttentionBackend
from llmd.attention.cpu_extension import CPU_OP_DTYPES
from llmd.attention.inputs import AttentionInputs
from llmd.attention.metadata import AttentionMetadata
from llmd.layers.kernel_config import KernelConfig
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
        self.k_scale = 1.0
        """An fp8 KV cache holds key / k_scale (1.0 unless the checkpoint gives a scale)."""
        self.v_scale = 1.0
        """An fp8 KV cache holds value / v_scale."""
        self.has_kv_scales = False
        """Whether the checkpoint gave k_scale / v_scale (fp8 KV checkpoints do)."""
        self.backend = attention_backend
        self.qkv_proj = nn.Linear(hidden_size, self.q_size + 2 * self.kv_size, bias=qkv_bias)
        self.o_proj = nn.Linear(self.q_size, hidden_size, bias=o_bias)
        self.has_qk_norm = qk_norm_eps is not None
        if qk_norm_eps is not None:
            self.q_norm = RMSNorm(head_dim, qk_norm_eps)
            self.k_norm = RMSNorm(head_dim, qk_norm_eps)
        self.kernel_config = KernelConfig()
        self._triton_rotary: Callable | None = None
        self._cpu_ops: Any = None
        self._cpu_rotary: Callable | None = None

    def use_kernel_config(self, config: KernelConfig) -> None:
        """Rotate with llmd.kernels.rotary when `config` selects Triton kernels, with the
        C++ rotary op when it selects the CPU ops.

        The q/k norms are layers of their own and receive the config separately.
        """
        self.kernel_config = config
        self._triton_rotary = self._cpu_ops = self._cpu_rotary = None
        if config.use_cpu_ops:
            from llmd.attention.cpu_extension import load_cpu_ops

            self._cpu_ops = load_cpu_ops()
            self._cpu_rotary = self._cpu_ops.rotary_embedding.default
        if config.use_triton:
            from llmd.kernels.rotary import rotary_embedding

            self._triton_rotary = rotary_embedding

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
        if self._triton_rotary is not None:
            query, key = self._rotate_with_kernel(qkv, cos, sin)
        elif self._cpu_ops is not None and _rotates_with_cpu_op(qkv.dtype, cos.dtype):
            query, key = self._rotate_with_cpu_op(qkv, cos, sin)
        elif self.has_qk_norm:
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
        inputs = AttentionInputs(
            query, key, value, k_cache, v_cache, metadata, self.scale, self.k_scale, self.v_scale
        )
        out = self.backend.forward(inputs)
        return self.o_proj(out.reshape(num_tokens, self.q_size))

    def _rotate_with_cpu_op(
        self,
        qkv: torch.Tensor,  # [num_tokens, num_heads + 2 * num_kv_heads, head_dim], fp32/bf16
        cos: torch.Tensor,  # [num_tokens, 1, head_dim // 2]
        sin: torch.Tensor,  # [num_tokens, 1, head_dim // 2]
    ) -> tuple[torch.Tensor, torch.Tensor]:  # query, key
        """(Norm and) rotate q and k in place with the C++ op (views of qkv without q/k norm)."""
        cos_rows = cos.squeeze(1)  # [num_tokens, head_dim // 2]
        sin_rows = sin.squeeze(1)
        num_heads = self.num_heads
        num_qk_heads = num_heads + self.num_kv_heads
        rotate = self._cpu_rotary
        if not self.has_qk_norm:
            rotate(qkv[:, :num_qk_heads], cos_rows, sin_rows)  # q and k heads, in place
            return qkv[:, :num_heads], qkv[:, num_heads:num_qk_heads]  # strided views
        query = self.q_norm(qkv[:, :num_heads])  # [num_tokens, num_heads, head_dim]
        key = self.k_norm(qkv[:, num_heads:num_qk_heads])
        rotate(query, cos_rows, sin_rows)
        rotate(key, cos_rows, sin_rows)
        return query, key

    def _rotate_with_kernel(
        self,
        qkv: torch.Tensor,  # [num_tokens, num_heads + 2 * num_kv_heads, head_dim]
        cos: torch.Tensor,  # [num_tokens, 1, head_dim // 2]
        sin: torch.Tensor,  # [num_tokens, 1, head_dim // 2]
    ) -> tuple[torch.Tensor, torch.Tensor]:  # query, key (views of qkv without q/k norm)
        """(Norm and) rotate q and k in place in one launch; cos/sin rows are per token."""
        num_tokens = qkv.shape[0]
        num_qk_heads = self.num_heads + self.num_kv_heads
        query = qkv[:, : self.num_heads]  # [num_tokens, num_heads, head_dim], rows strided
        key = qkv[:, self.num_heads : num_qk_heads]  # [num_tokens, num_kv_heads, head_dim]
        if self.has_qk_norm:
            query = self.q_norm(query)  # contiguous copies, rotated in place below
            key = self.k_norm(key)
        # The gathered cos/sin act as a table with one row per token, indexed by row number.
        row_ids = torch.arange(num_tokens, device=qkv.device)  # [num_tokens]
        self._triton_rotary(
            row_ids, query, key, cos.reshape(num_tokens, -1), sin.reshape(num_tokens, -1)
        )
        return query, key


def _rotates_with_cpu_op(qkv_dtype: torch.dtype, cos_dtype: torch.dtype) -> bool:
    """Whether the C++ rotary op takes these dtypes: float32 or bfloat16, cos/sin alike (in
    bf16 it rounds each product and sum as apply_rotary's ops do, matching them bit for bit)."""
    return qkv_dtype == cos_dtype and qkv_dtype in CPU_OP_DTYPES
