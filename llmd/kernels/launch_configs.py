"""Tile sizes, warps and pipeline stages of the attention kernels, per GPU architecture.

One configuration for every GPU either wastes Hopper or overflows the others: Ada (8.9)
and consumer Ampere (8.6) have 99 KiB of shared memory per block where Hopper has 227, so
Hopper's head-dim-256 prefill tiles do not even launch there. Each entry below compiles
within its architecture's shared-memory limit without register spills, checked offline
for every kernel x arch x dtype x head_dim by `scripts/compile_kernels.py` (and its test).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

SUPPORTED_ARCHS = (80, 86, 89, 90)
"""Compute capabilities with tuned entries (A100, A10/RTX 30xx, L4/L40S/RTX 4090, H100/H200)."""
SHARED_MEMORY_BYTES = {80: 166_912, 86: 101_376, 89: 101_376, 90: 232_448}
"""Largest dynamic shared memory one block may use (opt-in limit), per architecture."""
INTERPRETER_ARCH = 0
"""Arch key of the CPU interpreter: small tiles, one stage."""


@dataclass(frozen=True)
class PrefillConfig:
    """Launch shape of the prefill kernel: rows per program, K/V tile, warps, stages."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


@dataclass(frozen=True)
class DecodeConfig:
    """Launch shape of the decode kernel: K/V tile, warps, stages."""

    block_n: int
    num_warps: int
    num_stages: int


def arch_of(device: torch.device) -> int:
    """The tuning key of `device`: 10 * major + minor, rounded down to a supported arch.

    Off CUDA it is INTERPRETER_ARCH. Newer GPUs get the closest older entry (Blackwell is
    served Hopper's tiles, which fit its larger shared memory).
    """
    if device.type != "cuda":
        return INTERPRETER_ARCH
    return _supported_arch(_capability(device.index or 0))


@functools.cache
def _capability(index: int) -> int:
    major, minor = torch.cuda.get_device_capability(index)
    return 10 * major + minor


def _supported_arch(capability: int) -> int:
    eligible = [arch for arch in SUPPORTED_ARCHS if arch <= capability]
    return max(eligible) if eligible else SUPPORTED_ARCHS[0]


def prefill_config(
    arch: int, head_dim: int, dtype: torch.dtype, is_fp8_kv: bool = False
) -> PrefillConfig:
    """The prefill launch for `arch` (see SUPPORTED_ARCHS), head dim, dtype and cache kind.

    Shared memory is about num_stages x block_n x head_dim x 2 (K and V) plus the query tile
    of block_m x head_dim, times the element size; fp32 also needs registers for 3xTF32 dots.
    Hopper's bf16/fp16 entries are the ones measured on an H200 (docs/gpu-report.md); its
    former fp32 tiles spilled and, at head dim 256, needed 256 KiB of shared memory. An fp8
    cache converts K/V in registers: Hopper's 64-token tiles then spilled at head dim 256.
    """
    if arch == INTERPRETER_ARCH:
        return PrefillConfig(64, 32, 4, 1)
    if dtype == torch.float32:  # 3xTF32 dots triple a tile's registers (every arch spilled)
        if head_dim > 128:
            return PrefillConfig(16, 16, 8, 1)
        return PrefillConfig(32, 16, 8, 1)
    if arch == 90:
        if head_dim <= 128:
            return PrefillConfig(128, 64, 8, 3)  # two warpgroups of 64 rows (wgmma)
        return PrefillConfig(64, 32 if is_fp8_kv else 64, 8, 2)
    if arch == 80:
        if head_dim <= 128:
            return PrefillConfig(128, 64, 8, 2)
        return PrefillConfig(64, 32, 8, 2)
    if head_dim <= 128:  # 8.6 / 8.9: 99 KiB of shared memory
        return PrefillConfig(64, 32, 4, 2)
    return PrefillConfig(64, 32, 8, 1)


def decode_config(
    arch: int, head_dim: int, dtype: torch.dtype, is_fp8_kv: bool = False
) -> DecodeConfig:
    """The decode launch for `arch`, head dim, dtype and cache kind (bandwidth-bound: modest
    tiles; fp32 dots on an fp8 cache, converted in registers, spilled with 64-token tiles)."""
    if arch == INTERPRETER_ARCH:
        return DecodeConfig(64 if head_dim <= 128 else 32, 4, 1)
    is_small_smem = arch in (86, 89)
    if head_dim > 128:
        if dtype == torch.float32:  # 3xTF32 on 256-wide rows: 8 warps
            return DecodeConfig(16, 8, 1 if is_small_smem else 2)
        return DecodeConfig(16 if is_small_smem else 32, 4, 2)
    if head_dim <= 64:
        if dtype == torch.float32 and is_small_smem:  # 32-token 3xTF32 tiles spilled 8 B
            return DecodeConfig(16, 4, 2)
        return DecodeConfig(32, 4, 2)  # 64-token tiles left an 8-byte stack on sm_86 and 9.0
    if dtype == torch.float32 and is_fp8_kv:
        return DecodeConfig(32, 4, 2)
    return DecodeConfig(64, 4, 2)


def tile_num_warps(num_elements: int) -> int:
    """Warps of a one-token program that moves a tile of `num_elements` (the KV store and
    rotary kernels): one per 256 elements, 1 to 8."""
    return max(1, min(8, num_elements // 256))
