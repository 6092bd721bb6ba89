"""Rotary position embeddings with a precomputed cos/sin table indexed by position.

Building the table once and gathering rows per step replaces per-layer trigonometry with
one index op per step; the rotation uses HF's rotate_half layout (first half, second half)
so checkpoints trained with transformers get bit-compatible positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from llmd.errors import UnsupportedModelError

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")
DEFAULT_ROPE_THETA = 10000.0


@dataclass(frozen=True)
class RopeParameters:
    """A checkpoint's RoPE settings, normalized across transformers 4 and 5 config styles."""

    theta: float
    rope_type: str
    scaling: dict[str, Any]


def read_rope_parameters(hf_config: Any) -> RopeParameters:
    """Read rope_theta and the scaling dict from `rope_parameters` or legacy `rope_scaling`."""
    scaling: dict[str, Any] = {}
    for attribute in ("rope_scaling", "rope_parameters"):
        value = getattr(hf_config, attribute, None)
        if isinstance(value, dict):
            scaling.update(value)
    theta = scaling.get("rope_theta", getattr(hf_config, "rope_theta", None))
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise UnsupportedModelError(
            f"rope type {rope_type!r} is not supported "
            f"(supported: {', '.join(SUPPORTED_ROPE_TYPES)})",
            "rope_scaling",
        )
    partial_rotary_factor = scaling.get(
        "partial_rotary_factor", getattr(hf_config, "partial_rotary_factor", 1.0)
    )
    if partial_rotary_factor not in (None, 1, 1.0):
        raise UnsupportedModelError(
            f"partial_rotary_factor={partial_rotary_factor} is not supported", "rope_scaling"
        )
    return RopeParameters(
        theta=float(theta) if theta is not None else DEFAULT_ROPE_THETA,
        rope_type=rope_type,
        scaling=scaling,
    )


def inverse_frequencies(head_dim: int, rope: RopeParameters) -> torch.Tensor:
    """Return the [head_dim // 2] float32 inverse frequencies, scaled per `rope.rope_type`."""
    # Always on the CPU: models may be built under a meta-device context.
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim
    inv_freq = 1.0 / (rope.theta**exponents)  # [head_dim // 2]
    if rope.rope_type == "linear":
        return inv_freq / float(rope.scaling["factor"])
    if rope.rope_type == "llama3":
        return _llama3_scaled(inv_freq, rope.scaling)
    return inv_freq


def _llama3_scaled(inv_freq: torch.Tensor, scaling: dict[str, Any]) -> torch.Tensor:
    """Llama 3.1 scaling: keep high frequencies, divide low ones by factor, blend between."""
    factor = float(scaling["factor"])
    low_freq_factor = float(scaling["low_freq_factor"])
    high_freq_factor = float(scaling["high_freq_factor"])
    original_len = float(scaling["original_max_position_embeddings"])
    wavelength = 2 * math.pi / inv_freq
    is_low_freq = wavelength > original_len / low_freq_factor
    is_high_freq = wavelength < original_len / high_freq_factor
    scaled = torch.where(is_low_freq, inv_freq / factor, inv_freq)
    smooth = (original_len / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium_freq = ~is_low_freq & ~is_high_freq
    return torch.where(is_medium_freq, blended, scaled)


class RotaryEmbedding:
    """cos/sin tables for positions [0, max_position), built lazily on the first device used.

    A plain object rather than a module: `model.to(dtype)` must not round the float32
    table, and it is derived data that never belongs in a checkpoint.
    """

    def __init__(self, head_dim: int, max_position: int, rope: RopeParameters) -> None:
        self.head_dim = head_dim
        self.max_position = max_position
        self.inv_freq = inverse_frequencies(head_dim, rope)  # [head_dim // 2]
        self._cos_table: torch.Tensor | None = None  # [max_position, head_dim // 2]
        self._sin_table: torch.Tensor | None = None

    def cos_sin(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return cos and sin for `positions`, each [num_tokens, 1, head_dim // 2] in `dtype`."""
        if self._cos_table is None or self._cos_table.device != positions.device:
            self._build_tables(positions.device)
        cos = self._cos_table[positions].to(dtype).unsqueeze(1)
        sin = self._sin_table[positions].to(dtype).unsqueeze(1)
        return cos, sin

    def _build_tables(self, device: torch.device) -> None:
        steps = torch.arange(self.max_position, dtype=torch.float32, device="cpu")
        angles = torch.outer(steps, self.inv_freq)  # [max_position, head_dim // 2]
        self._cos_table = angles.cos().to(device)
        self._sin_table = angles.sin().to(device)


def apply_rotary(
    x: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    cos: torch.Tensor,  # [num_tokens, 1, head_dim // 2]
    sin: torch.Tensor,  # [num_tokens, 1, head_dim // 2]
) -> torch.Tensor:  # [num_tokens, num_heads, head_dim], contiguous
    """Rotate pairs (i, i + head_dim/2) by each position's angle (HF's rotate_half layout)."""
    first, second = x.chunk(2, dim=-1)  # [num_tokens, num_heads, head_dim // 2] each
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)
