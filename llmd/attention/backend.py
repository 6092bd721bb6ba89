"""The attention backend interface.

Models call one `forward` whatever the device; the runner picks the backend once
(`llmd.attention.factory`), so the torch reference, the CPU op and the Triton kernels are
interchangeable without touching model code.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from llmd.attention.metadata import AttentionMetadata


class AttentionBackend(ABC):
    """Stores a step's new K/V into the paged cache and computes causal paged attention."""

    name: str = "abstract"

    @abstractmethod
    def forward(
        self,
        query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
        key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
        v_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
        metadata: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:  # [num_tokens, num_heads, head_dim]
        """Write key/value into their slots, then attend each query over its context."""

    def kv_cache_shapes(
        self, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(k_shape, v_shape) of one layer's cache; the default is token-major for both."""
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        return shape, shape
