"""Layers switched to Triton kernels match their torch path (interpreted on CPU machines).

The model code never changes between backends, so these checks (per layer, then a whole
tiny model through prefill and decode) are what guarantees the fused path computes the
same function as the torch path.
"""

from __future__ import annotations

import copy

import pytest
import torch

from llmd.attention.reference import build_metadata
from llmd.attention.torch_backend import TorchAttentionBackend
from llmd.layers.activation import GatedActivation
from llmd.layers.kernel_config import KernelConfig, configure_kernels
from llmd.layers.norm import RMSNorm
from llmd.models.loader import load_hf_config, load_model, model_shape
from tests.checkpoints import make_tiny_checkpoint
from tests.kernels.tolerances import elementwise_tolerance
from tests.kernels.triton_env import (
    HAS_TRITON,
    device_params,
    enable_interpreter_without_cuda,
    skip_unless_runnable,
)

enable_interpreter_without_cuda()  # before llmd.kernels modules are imported (lazily)

TRITON_KERNELS = KernelConfig(use_triton=True)
BLOCK_SIZE = 4
NUM_BLOCKS = 16


@pytest.fixture(params=device_params())
def device(request) -> str:
    """Device to run on; skips where triton cannot run there."""
    skip_unless_runnable(request.param)
    return request.param


def test_kernel_config_follows_backend_and_device():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    plain, triton_like, cpu_like = (TorchAttentionBackend() for _ in range(3))
    triton_like.pairs_with_triton_layers = True  # what the triton backend declares
    cpu_like.pairs_with_cpu_layer_ops = True  # what the cpu backend declares
    assert KernelConfig.for_backend(triton_like, cuda).use_triton
    assert not KernelConfig.for_backend(triton_like, cpu).use_triton
    assert not KernelConfig.for_backend(plain, cuda).use_triton
    assert KernelConfig.for_backend(cpu_like, cpu).use_cpu_ops
    assert not KernelConfig.for_backend(cpu_like, cuda).use_cpu_ops
    assert KernelConfig.for_backend(plain, cpu) == KernelConfig()
    assert not KernelConfig().use_triton


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_kernel_matches_torch(device, dtype):
    generator = torch.Generator().manual_seed(0)
    norm = RMSNorm(64, 1e-6)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.1 * torch.randn(64, generator=generator))
    norm = norm.to(device=device, dtype=dtype)
    fused = copy.deepcopy(norm)
    fused.use_kernel_config(TRITON_KERNELS)
    hidden = torch.randn(5, 64, generator=generator).to(device=device, dtype=dtype)
    residual = torch.randn(5, 64, generator=generator).to(device=device, dtype=dtype)
    # Per-head norm input: a strided view of a wider [tokens, heads, dim] tensor.
    heads = torch.randn(5, 6, 64, generator=generator).to(device=device, dtype=dtype)[:, 1:4]
    # bf16: the interpreter truncates instead of rounding, and the kernel rounds twice.
    tolerance = elementwise_tolerance(dtype) | ({"atol": 4e-2} if dtype == torch.bfloat16 else {})
    torch.testing.assert_close(fused(hidden), norm(hidden), **tolerance)
    torch.testing.assert_close(fused(heads), norm(heads), **tolerance)
    (normed, new_residual), (expected, expected_residual) = (
        fused(hidden, residual),
        norm(hidden, residual),
    )
    torch.testing.assert_close(normed, expected, **tolerance)
    torch.testing.assert_close(new_residual, expected_residual, **elementwise_tolerance(dtype))


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
def test_silu_uses_kernel_and_gelu_keeps_torch(device):
    gate_up = torch.randn(3, 40, generator=torch.Generator().manual_seed(0)).to(device)
    silu, gelu = GatedActivation("silu"), GatedActivation("gelu")
    expected_silu, expected_gelu = silu(gate_up), gelu(gate_up)
    silu.use_kernel_config(TRITON_KERNELS)
    gelu.use_kernel_config(TRITON_KERNELS)
    assert silu._triton_silu_mul is not None and gelu._triton_silu_mul is None
    torch.testing.assert_close(silu(gate_up), expected_silu, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gelu(gate_up), expected_gelu, atol=0, rtol=0)
    silu.use_kernel_config(KernelConfig())  # and back to torch
    assert silu._triton_silu_mul is None


def _prefill_then_decode(model, shape, device) -> list[torch.Tensor]:
    """Hidden states of a two-prompt prefill step and the decode step after it."""
    cache_shape = (NUM_BLOCKS, BLOCK_SIZE, shape.num_kv_heads, shape.head_dim)
    kv_caches = [
        (torch.zeros(cache_shape, device=device), torch.zeros(cache_shape, device=device))
        for _ in range(shape.num_layers)
    ]
    generator = torch.Generator().manual_seed(3)
    prefill, block_ids = build_metadata(
        [7, 5], [7, 5], BLOCK_SIZE, NUM_BLOCKS, device=device, generator=generator
    )
    decode, _ = build_metadata(
        [1, 1], [8, 6], BLOCK_SIZE, NUM_BLOCKS, device=device, block_ids_per_seq=block_ids
    )
    steps = [
        (torch.arange(1, 13), torch.tensor([*range(7), *range(5)]), prefill),
        (torch.tensor([40, 41]), torch.tensor([7, 5]), decode),
    ]
    outputs = []
    with torch.inference_mode():
        for input_ids, positions, metadata in steps:
            outputs.append(model(input_ids.to(device), positions.to(device), kv_caches, metadata))
    return outputs


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_tiny_model_with_triton_layer_kernels_matches_torch(device, tmp_path, arch):
    path = make_tiny_checkpoint(arch, tmp_path / arch)
    hf_config = load_hf_config(path)
    shape = model_shape(hf_config)
    model = load_model(
        path, hf_config, TorchAttentionBackend(), torch.float32, torch.device(device)
    )
    expected = _prefill_then_decode(model, shape, device)
    num_configured = configure_kernels(model, TRITON_KERNELS)
    # Per layer: attention (rotary), MLP activation, two norms (+ q/k norms); final norm.
    per_layer = 4 + (2 if arch == "qwen3" else 0)
    assert num_configured == shape.num_layers * per_layer + 1
    layer = model.model.layers[0]
    assert layer.input_layernorm._triton_fused_add_rms_norm is not None
    assert layer.self_attn._triton_rotary is not None
    for got, want in zip(_prefill_then_decode(model, shape, device), expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("arch", ["qwen3_moe", "mixtral", "qwen2_moe"])
def test_tiny_moe_model_with_triton_grouped_experts_matches_torch(device, tmp_path, arch):
    """The experts switch to the grouped GEMMs (every MoE layer), the rest as above."""
    from llmd.layers.fused_moe import FusedMoE

    path = make_tiny_checkpoint(arch, tmp_path / arch)
    hf_config = load_hf_config(path)
    shape = model_shape(hf_config)
    model = load_model(
        path, hf_config, TorchAttentionBackend(), torch.float32, torch.device(device)
    )
    expected = _prefill_then_decode(model, shape, device)
    configure_kernels(model, TRITON_KERNELS)
    experts = [module for module in model.modules() if isinstance(module, FusedMoE)]
    assert len(experts) == shape.num_moe_layers > 0
    assert all(module.kernel_config.use_triton for module in experts)
    for got, want in zip(_prefill_then_decode(model, shape, device), expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
