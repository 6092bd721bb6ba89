"""Choosing the attention backend: auto, cpu, torch or triton.

Apart from the interface (`llmd.attention.backend`), so the backends import their base
class and the factory imports them, never the other way round. Each backend is imported
only when chosen, so a CPU machine never loads Triton.
"""

from __future__ import annotations

import logging

import torch

from llmd.attention.backend import AttentionBackend
from llmd.errors import InvalidParameterError

logger = logging.getLogger(__name__)


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
