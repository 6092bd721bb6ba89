"""The attention backend interface and its factory.

Models call one `forward` whatever the device; the runner picks the backend once, so the
torch reference and the Triton kernels are interchangeable without touching model code.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from llmd.attention.metadata import AttentionMetadata
from llmd.errors import InvalidParameterError


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


def create_attention_backend(name: str, device: torch.device) -> AttentionBackend:
    """Return the backend called `name` (auto: triton on CUDA, torch otherwise)."""
    if name == "auto":
        name = "triton" if device.type == "cuda" else "torch"
    if name == "torch":
        from llmd.attention.torch_backend import TorchAttentionBackend

        return TorchAttentionBackend()
    if name == "triton":
        from llmd.attention.triton_backend import TritonAttentionBackend

        return TritonAttentionBackend()
    raise InvalidParameterError("must be auto, torch or triton", "attention_backend")
