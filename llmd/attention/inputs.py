"""What one layer's attention call reads and writes, as one value every backend takes.

The signature is declared once here rather than repeated in each backend's `forward`, so
the tensor shapes are documented in one place and a new argument reaches every backend.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from llmd.attention.metadata import AttentionMetadata


@dataclass(frozen=True)
class AttentionInputs:
    """One layer's new query/key/value, its paged K/V cache, the step's metadata and scale."""

    query: torch.Tensor
    """[num_tokens, num_heads, head_dim]; may be a strided view into the fused qkv output."""
    key: torch.Tensor
    """[num_tokens, num_kv_heads, head_dim]: stored into the cache at `slot_mapping`."""
    value: torch.Tensor
    """[num_tokens, num_kv_heads, head_dim]: stored into the cache at `slot_mapping`."""
    k_cache: torch.Tensor
    """The layer's key blocks, in the backend's `kv_cache_shapes` layout."""
    v_cache: torch.Tensor
    """The layer's value blocks, in the backend's `kv_cache_shapes` layout."""
    metadata: AttentionMetadata
    """Where the new tokens go and which cached tokens each query attends to."""
    scale: float
    """Softmax scale applied to q.K (usually head_dim ** -0.5)."""
    k_scale: float = 1.0
    """An fp8 cache holds key / k_scale (other caches hold the keys themselves and ignore it)."""
    v_scale: float = 1.0
    """An fp8 cache holds value / v_scale (other caches ignore it)."""
