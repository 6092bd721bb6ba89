"""The Triton int4 layer (CUDA's W4A16 path) from each checkpoint format against the weight
the writer quantized, and a whole tiny model through it against the dequantized model.

On machines without CUDA the kernel runs in triton's interpreter; the layer is then built on
CPU by bypassing the CUDA-only choice in `build_linear` (`choose_triton_layers_on_cpu`).
"""

from __future__ import annotations

import types

import pytest
import torch

from llmd.attention.torch_backend import TorchAttentionBackend
from llmd.models.loader import load_hf_config, load_model
from llmd.quantization import (
    awq_format,
    compressed_tensors_format,
    gptq_format,
    linear_builder,
    triton_int4_linear,
)
from llmd.quantization.grouped_weight import GroupedIntWeight
from llmd.quantization.module_tensors import ModuleTensors
from llmd.quantization.quant_config import read_quantization_config
from llmd.quantization.triton_int4_linear import (
    TritonInt4Linear,
    can_run_triton_int4,
    fits_w4a16_kernel,
)
from llmd.quantization.weight_bytes import model_weight_bytes
from tests.kernels.triton_env import (
    device_params,
    enable_interpreter_without_cuda,
    skip_unless_runnable,
)
from tests.quantization.test_quantized_models import llmd_logits, prompt
from tests.quantized_checkpoints import RECIPES, quantization_config, quantize_module

enable_interpreter_without_cuda()  # before llmd.kernels.w4a16_gemm is imported (lazily)

FOUR_BIT_RECIPES = [name for name, recipe in RECIPES.items() if recipe.num_bits == 4]
RELATIVE_TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float32: 1e-5}
"""Largest |layer - reference| / max |reference| (see tests/kernels/test_w4a16_gemm.py)."""
LOGITS_ATOL = {torch.float32: 1e-4, torch.bfloat16: 0.1}
"""|Triton-layer model - dequantized model| over the logits (about 3 at most): float32
differs in summation order (2e-6 measured); bfloat16 rounds the dense weights, activations
and outputs (0.04 measured)."""
MODULE = "model.layers.0.mlp.down_proj"


@pytest.fixture(params=device_params())
def device(request) -> str:
    """Device to run on; skips where triton cannot run there."""
    skip_unless_runnable(request.param)
    return request.param


def read_shard(recipe_name: str, out_features: int, in_features: int, seed: int = 0):
    """(GroupedIntWeight as llmd's reader gives it, the float32 weight the writer meant)."""
    recipe = RECIPES[recipe_name]
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(out_features, in_features, generator=generator) * 0.1
    stored, dequantized = quantize_module(weight, recipe, generator)
    config = read_quantization_config(types.SimpleNamespace(
        quantization_config=quantization_config(recipe)))  # fmt: skip
    assert config is not None
    scheme = config.scheme_for(MODULE)
    assert scheme is not None
    tensors = ModuleTensors(MODULE, (out_features, in_features), dict(stored))
    if recipe.method == "awq":
        return awq_format.read_awq(tensors, scheme), dequantized
    if recipe.method == "gptq":
        return gptq_format.read_gptq(tensors, scheme), dequantized
    return compressed_tensors_format.read_compressed_tensors(tensors, scheme), dequantized


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return ((got.float() - expected.float()).abs().max() / expected.float().abs().max()).item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("recipe", FOUR_BIT_RECIPES)
@pytest.mark.parametrize("num_rows", [1, 33])
def test_each_format_repacks_into_the_weight_the_writer_quantized(device, dtype, recipe, num_rows):
    shard, dequantized = read_shard(recipe, 48, 128)
    assert isinstance(shard, GroupedIntWeight) and fits_w4a16_kernel(shard)
    bias = torch.randn(48, generator=torch.Generator().manual_seed(5))
    layer = TritonInt4Linear(shard, bias, dtype).to(device)
    assert (layer.zeros is not None) == (not RECIPES[recipe].is_symmetric)
    assert (layer.column_order is not None) == RECIPES[recipe].act_order
    hidden = torch.randn(num_rows, 128, generator=torch.Generator().manual_seed(6)).to(dtype)
    got = layer(hidden.to(device)).cpu()
    assert got.dtype == dtype and got.shape == (num_rows, 48)
    expected = hidden.float() @ dequantized.t() + bias  # the writer's own weight
    assert relative_error(got, expected) < RELATIVE_TOLERANCE[dtype]
    three_d = layer(hidden.reshape(1, num_rows, 128).to(device)).cpu()
    assert torch.equal(three_d.reshape(num_rows, 48), got)


def test_only_4_bit_weights_on_cuda_with_fitting_groups_are_taken():
    shard, _ = read_shard("w4a16-g32", 16, 64)
    assert fits_w4a16_kernel(shard)
    assert not can_run_triton_int4(shard, torch.device("cpu"))  # CPU keeps Int4Linear
    assert (
        can_run_triton_int4(shard, torch.device("cuda")) == triton_int4_linear.is_triton_available()
    )
    int8, _ = read_shard("w8a16-channel", 16, 64)
    assert isinstance(int8, GroupedIntWeight) and not fits_w4a16_kernel(int8)
    odd_groups = GroupedIntWeight(shard.values, shard.scales[:, :1].repeat(1, 3), None, 24, 4)
    assert not fits_w4a16_kernel(odd_groups)  # groups of 24: no K tile divides them


def choose_triton_layers_on_cpu(monkeypatch) -> None:
    """Make `build_linear` choose the Triton layer where it fits, as it does on CUDA."""
    monkeypatch.setattr(linear_builder, "can_run_int4", lambda weight, device: False)
    monkeypatch.setattr(
        linear_builder, "can_run_triton_int4", lambda weight, device: fits_w4a16_kernel(weight)
    )


@pytest.mark.parametrize(
    ("recipe", "dtype"),
    [
        ("w4a16-asym-g32", torch.float32),
        ("awq-g32", torch.float32),
        ("gptq-act-order-g32", torch.float32),
        ("w4a16-channel", torch.float32),
        ("gptq-g32", torch.bfloat16),  # the dtype a GPU serves in
    ],
)
def test_a_tiny_model_on_the_triton_layer_matches_the_dequantized_model(
    tmp_path, device, recipe, dtype, monkeypatch
):
    """On CUDA the loader's own choice is checked; on CPU it is forced (interpreter)."""
    from tests.quantized_checkpoints import write_quantized_pair

    if device == "cpu":
        choose_triton_layers_on_cpu(monkeypatch)
    on = torch.device(device)
    quantized, reference = write_quantized_pair(tmp_path, "llama", recipe)
    hf_config = load_hf_config(quantized)
    model = load_model(quantized, hf_config, TorchAttentionBackend(), dtype, on)
    decoder_linears = [m for n, m in model.named_modules() if ".layers." in n and
                       isinstance(m, (TritonInt4Linear, torch.nn.Linear))]  # fmt: skip
    assert len(decoder_linears) == 4 * hf_config.num_hidden_layers
    assert all(type(module) is TritonInt4Linear for module in decoder_linears)
    dense = load_model(reference, load_hf_config(reference), TorchAttentionBackend(), dtype, on)
    assert model_weight_bytes(model) < model_weight_bytes(dense)
    token_ids = prompt()
    got = llmd_logits(model, hf_config, token_ids, dtype, on)
    expected = llmd_logits(dense, hf_config, token_ids, dtype, on)
    assert (got - expected).abs().max().item() < LOGITS_ATOL[dtype]
