"""The attention backend interface.

Models call one `forward` whatever the device; the runner picks the backend once
(`llmd.attention.factory`), so the torch reference, the CPU op and the Triton kernels are
interchangeable without touching model code.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from llmd.attention.inputs import AttentionInputs


class AttentionBackend(ABC):
    """Stores a step's new K/V into the paged cache and computes causal paged attention."""

    name: str = "abstract"
    """What the user calls it (`attention_backend=`); decisions read the fields below."""
    supports_cuda_graphs: bool = False
    """True when `forward` never reads metadata values on the host, so a decode step can be
    captured once in a CUDA graph and replayed."""
    reads_any_kv_dtype: bool = False
    """True when the cache may hold another dtype than the activations (the backend
    computes in float32 either way); otherwise K/V are stored in the model's dtype."""
    reads_fp8_kv: bool = False
    """True when the cache may be fp8 e4m3 (K / k_scale, V / v_scale) whatever the
    activations' dtype; `check_kv_cache_dtype` may still refuse it on a given device."""
    pairs_with_triton_layers: bool = False
    """True when the layers should run llmd's Triton kernels alongside it (on CUDA)."""
    pairs_with_cpu_layer_ops: bool = False
    """True when the layers should run the C++ CPU layer ops built with its extension."""

    @abstractmethod
    def forward(self, inputs: AttentionInputs) -> torch.Tensor:
        """Write key/value into their slots, then attend each query over its context."""

    def check_kv_cache_dtype(self, dtype: torch.dtype, device: torch.device) -> None:
        """Raise naming kv_cache_dtype when this backend cannot read a `dtype` cache on
        `device`; the default accepts what the abilities above declare."""
        return

    def kv_cache_shapes(
        self, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(k_shape, v_shape) of one layer's cache; the default is token-major for both."""
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        return shape, shape
