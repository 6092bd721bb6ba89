"""`LinearSlot`: where a quantized linear goes, held until the checkpoint's tensors are read.

The model is built on the meta device with dense `nn.Linear`s; allocating them would cost
the dense model's memory, so each quantized one is swapped for a slot that keeps only its
bias (loaded by the ordinary weight loader) and what the shards' tensors must match.
"""

from __future__ import annotations

import torch
from torch import nn

from llmd.quantization.weight_scheme import WeightScheme


class LinearSlot(nn.Module):
    """A quantized linear's bias and shape until `QuantizedLoader.install` replaces it."""

    def __init__(
        self,
        linear: nn.Linear,
        shard_names: tuple[str, ...],
        shard_sizes: tuple[int, ...],
        scheme: WeightScheme,
    ) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.bias = linear.bias  # stays a parameter: the weight loader fills it
        self.shard_names = shard_names
        """HF module names of the shards, in output order (q, k, v; gate, up; or one)."""
        self.shard_sizes = shard_sizes
        """Output rows of each shard."""
        self.scheme = scheme

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Never runs: the loader replaces every slot before the model is returned."""
        raise RuntimeError(f"quantized linear {self.shard_names} was never loaded")
