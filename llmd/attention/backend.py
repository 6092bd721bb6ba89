"""The attention backend interface and its factory.

Models call one `forward` whatever the device; the runner picks the backend once, so the
torch reference and the Triton kernels are interchangeable without touching model code.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod

import torch

from llmd.attention.metadata import AttentionMetadata
from llmd.errors import InvalidParameterError

logger = logging.getLogger(__name__)


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


def create_attention_backend(name: str, device: torch.device) -> AttentionBackend:
    """Return the backend called `name` (auto: triton on CUDA, cpu otherwise).

    The cpu backend compiles its op on first use; where that is impossible the torch
    backend runs instead, with one warning that says why.
    """
    if name == "auto":
        name = "triton" if device.type == "cuda" else "cpu"
    if name == "cpu":
        if device.type != "cpu":
            raise InvalidParameterError("the cpu backend runs only on the CPU", "attention_backend")
        from llmd.attention.cpu_backend import CpuAttentionBackend
        from llmd.attention.cpu_extension import CpuExtensionUnavailableError

        try:
            return CpuAttentionBackend()
        except CpuExtensionUnavailableError as error:
            logger.warning("CPU attention op unavailable, using the torch backend: %s", error)
            name = "torch"
    if name == "torch":
        from llmd.attention.torch_backend import TorchAttentionBackend

        return TorchAttentionBackend()
    if name == "triton":
        from llmd.attention.triton_backend import TritonAttentionBackend

        return TritonAttentionBackend()
    raise InvalidParameterError("must be auto, cpu, torch or triton", "attention_backend")
