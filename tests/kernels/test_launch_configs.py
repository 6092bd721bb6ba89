"""Launch configurations: which tuned arch a GPU gets, and the entries' basic invariants.
(Whether each entry fits its arch is checked by compiling: test_compile_kernels.py.)"""

from __future__ import annotations

import pytest
import torch

from llmd.kernels import launch_configs
from llmd.kernels.launch_configs import (
    INTERPRETER_ARCH,
    SUPPORTED_ARCHS,
    _supported_arch,
    arch_of,
    decode_config,
    prefill_config,
)


def test_gpus_map_to_the_closest_older_tuned_arch():
    assert [_supported_arch(c) for c in (80, 86, 87, 89, 90, 100, 120)] == [
        80, 86, 86, 89, 90, 90, 90,
    ]
    assert _supported_arch(75) == 80  # older than any entry: the smallest tiles we have
    assert arch_of(torch.device("cpu")) == INTERPRETER_ARCH


@pytest.mark.parametrize("arch", SUPPORTED_ARCHS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_entries_are_launchable_shapes(arch, dtype, head_dim):
    prefill = prefill_config(arch, head_dim, dtype)
    assert prefill.block_m in (16, 32, 64, 128, 256) and prefill.block_n in (16, 32, 64, 128)
    assert prefill.num_warps in (4, 8) and 1 <= prefill.num_stages <= 3
    decode = decode_config(arch, head_dim, dtype)
    assert decode.block_n in (16, 32, 64, 128) and decode.num_warps in (4, 8)
    # Ada and consumer Ampere have 99 KiB of shared memory: never Hopper's big tiles there.
    if arch in (86, 89):
        assert prefill.block_m * prefill.num_stages <= 128
    assert launch_configs.SHARED_MEMORY_BYTES[arch] >= 99 * 1024
