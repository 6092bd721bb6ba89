"""`ModuleTensors`: the quantized tensors a checkpoint holds for one linear layer, checked.

Every format reader asks it for a tensor by suffix and states the dtype and shape it
expects, so a missing scale or a misshapen packed weight is one error naming the tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from llmd.errors import UnsupportedQuantizationError


@dataclass
class ModuleTensors:
    """The tensors named `<module>.<suffix>` of one HF linear module, by suffix."""

    module: str
    """The HF module name, e.g. model.layers.0.self_attn.q_proj."""
    shape: tuple[int, int]
    """(out_features, in_features) the model's config gives this layer."""
    by_suffix: dict[str, torch.Tensor] = field(default_factory=dict)

    def name(self, suffix: str) -> str:
        """The checkpoint name of the tensor `suffix`."""
        return f"{self.module}.{suffix}"

    def has(self, suffix: str) -> bool:
        """Whether the checkpoint holds `suffix` for this module."""
        return suffix in self.by_suffix

    def require(
        self,
        suffix: str,
        dtypes: tuple[torch.dtype, ...] | None = None,
        shape: tuple[int, ...] | None = None,
    ) -> torch.Tensor:
        """The tensor `suffix`, checked against `dtypes` and `shape`; raise naming it."""
        tensor = self.by_suffix.get(suffix)
        if tensor is None:
            raise UnsupportedQuantizationError(
                f"quantized checkpoint is missing {self.name(suffix)!r}", "model"
            )
        if dtypes is not None and tensor.dtype not in dtypes:
            expected = " or ".join(str(dtype).removeprefix("torch.") for dtype in dtypes)
            raise UnsupportedQuantizationError(
                f"checkpoint tensor {self.name(suffix)!r} is "
                f"{str(tensor.dtype).removeprefix('torch.')}, expected {expected}",
                "model",
            )
        if shape is not None:
            self.check_shape(suffix, tensor, shape)
        return tensor

    def check_shape(self, suffix: str, tensor: torch.Tensor, shape: tuple[int, ...]) -> None:
        """Raise naming the tensor unless it has `shape`."""
        if tuple(tensor.shape) != tuple(shape):
            raise UnsupportedQuantizationError(
                f"checkpoint tensor {self.name(suffix)!r} has shape {tuple(tensor.shape)}, "
                f"expected {tuple(shape)} from the config and the quantization scheme",
                "model",
            )
