"""Checkpoints in transformers' own FP8 format (Qwen3-*-FP8, DeepSeek-V3 style) in llmd.

tests/hf_fp8_checkpoint.py writes each one next to a dense checkpoint of exactly the
weights its codes stand for: llmd's logits are held to HF transformers on that dense one,
and its greedy tokens to HF transformers reading the fp8 checkpoint itself.
"""

from __future__ import annotations

import importlib.util
import re
import types

import pytest
import torch
from safetensors.torch import load_file

from llmd.errors import InvalidParameterError, UnsupportedModelError, UnsupportedQuantizationError
from llmd.layers.fused_moe import FusedMoE
from llmd.models.loader import load_hf_config
from llmd.quantization.quant_config import (
    checked_quantization_config,
    quantization_name,
    read_quantization_config,
)
from tests.hf_fp8_checkpoint import write_hf_fp8_pair
from tests.quantization.test_quantization_errors import edit_config, edit_tensors, load
from tests.quantization.test_quantized_models import (
    LOGITS_ATOL,
    check_greedy_tokens_against_hf,
    hf_reference_logits,
    llmd_logits,
    load_llmd,
    prompt,
)
from tests.quantized_checkpoints import write_quantized_pair

WEIGHT_ONLY_NEAR_TIE = 1e-3
"""The near-tie rule: greedy tokens agree until a step where HF's logit for llmd's token is
within this of HF's best (then the two may part). On CPU transformers dequantizes these
checkpoints at load (`FineGrainedFP8HfQuantizer` sets `dequantize` without a GPU), so both
run the same float32 weights and only summation order differs."""
Q_PROJ = "model.layers.1.self_attn.q_proj"
EXPERT = "model.layers.0.mlp.experts.3.down_proj"

requires_accelerate = pytest.mark.skipif(
    importlib.util.find_spec("accelerate") is None,
    reason="accelerate is not installed: transformers' FP8 quantizer refuses to load without it",
)


pytestmark = pytest.mark.usefixtures("single_thread")


def max_logit_error(quantized, reference, seed: int = 0) -> float:
    """Largest |llmd on the fp8 checkpoint - HF on the dense one| over a prompt's logits."""
    model, hf_config = load_llmd(quantized)
    token_ids = prompt(seed)
    expected = hf_reference_logits(reference, token_ids)
    return (llmd_logits(model, hf_config, token_ids, torch.float32) - expected).abs().max().item()


@pytest.mark.parametrize(
    "arch, block",
    [
        ("llama", (128, 128)),  # the published block size: one short block per tiny tensor
        ("llama", (48, 40)),  # edge blocks cut short in both dims, several blocks a tensor
        ("llama", None),  # per-tensor scale (weight_block_size null)
        ("qwen3", (128, 128)),
        ("qwen3", (48, 40)),
    ],
)
def test_hf_fp8_logits_match_the_dequantized_model(tmp_path, arch, block):
    quantized, reference = write_hf_fp8_pair(tmp_path, arch, block)
    model, hf_config = load_llmd(quantized)
    decoder_linears = [
        module for name, module in model.named_modules()
        if ".layers." in name and isinstance(module, torch.nn.Linear)
    ]  # fmt: skip
    assert len(decoder_linears) == 4 * hf_config.num_hidden_layers  # dequantized on CPU
    assert max_logit_error(quantized, reference) < LOGITS_ATOL[torch.float32]


def test_a_static_activation_scheme_loads_its_weights_and_leaves_the_scale_unused(tmp_path):
    """llmd's CPU layers are weight-only and its CUDA fp8 GEMM scales activations per
    token, so the per-tensor `activation_scale` changes nothing, as compressed-tensors'
    `input_scale` does not."""
    quantized, reference = write_hf_fp8_pair(tmp_path, "qwen3", (32, 32), "static")
    assert f"{Q_PROJ}.activation_scale" in load_file(str(quantized / "model.safetensors"))
    assert max_logit_error(quantized, reference, seed=1) < LOGITS_ATOL[torch.float32]


def test_modules_to_not_convert_stay_dense(tmp_path):
    skipped = ["lm_head", "model.layers.1.self_attn", "down_proj"]  # prefix, and a suffix
    quantized, reference = write_hf_fp8_pair(tmp_path, "llama", (32, 32), "dynamic", skipped)
    tensors = load_file(str(quantized / "model.safetensors"))
    assert tensors[f"{Q_PROJ}.weight"].dtype == torch.float32  # written dense
    assert "model.layers.0.mlp.down_proj.weight_scale_inv" not in tensors
    assert max_logit_error(quantized, reference, seed=2) < LOGITS_ATOL[torch.float32]


def config_of(quantization_config: dict):
    return read_quantization_config(types.SimpleNamespace(quantization_config=quantization_config))


def test_the_config_follows_transformers_defaults_and_skip_rule():
    default = config_of({"quant_method": "fp8"})  # weight_block_size left out: [128, 128]
    assert default is not None and default.name == "fp8 fp8-block128x128"
    assert default.scheme_for("lm_head") is None  # no skip list: the head stays dense
    assert default.scheme_for("model.layers.0.mlp.gate") is None  # a router, no nn.Linear
    assert default.scheme_for("model.layers.0.mlp.experts.1.up_proj") is not None
    per_tensor = config_of({"quant_method": "fp8", "weight_block_size": None})
    assert per_tensor is not None and per_tensor.name == "fp8 fp8"
    skipping = config_of({"quant_method": "fp8", "modules_to_not_convert":
                          ["model.layers.1", "layers.*.mlp.gate_proj", "o_proj"]})  # fmt: skip
    assert skipping is not None
    assert skipping.scheme_for("model.layers.1.self_attn.q_proj") is None  # a prefix
    assert skipping.scheme_for("model.layers.11.self_attn.q_proj") is not None  # a boundary
    assert skipping.scheme_for("model.layers.3.self_attn.o_proj") is None  # a suffix
    assert skipping.scheme_for("model.layers.3.mlp.up_proj") is not None
    assert skipping.scheme_for("lm_head") is not None  # a skip list replaces the default


@pytest.mark.parametrize(
    "field, value",
    [
        ("activation_scheme", "per-token"),
        ("weight_block_size", [128]),
        ("scale_fmt", "ue8m0"),
        ("expert_dtype", "fp4"),
        ("modules_to_convert", ["model.embed_tokens"]),
        ("modules_to_not_convert", ["model.layers.[0"]),  # not a regular expression
    ],
)
def test_unsupported_fp8_config_fields_are_named(tmp_path, field, value):
    quantized, _ = write_hf_fp8_pair(tmp_path, "llama")
    edit_config(quantized, lambda config: config.update({field: value}))
    with pytest.raises(UnsupportedQuantizationError, match=f"quantization_config.{field} = "):
        load(quantized)


@pytest.mark.parametrize(
    "edit, named",
    [
        (lambda t: t.pop(f"{Q_PROJ}.weight_scale_inv"),
         f"missing '{Q_PROJ}.weight_scale_inv'"),
        (lambda t: t.update({f"{Q_PROJ}.weight_scale_inv": torch.ones(2, 2)}),
         f"'{Q_PROJ}.weight_scale_inv' has shape (2, 2), expected (1, 1)"),
        (lambda t: t.update({f"{Q_PROJ}.weight": t[f"{Q_PROJ}.weight"].half()}),
         f"'{Q_PROJ}.weight' is float16, expected float8_e4m3fn"),
    ],
)  # fmt: skip
def test_missing_or_misshapen_fp8_tensors_are_named(tmp_path, edit, named):
    quantized, _ = write_hf_fp8_pair(tmp_path, "llama", (128, 128))
    edit_tensors(quantized, edit)
    with pytest.raises(UnsupportedQuantizationError, match=re.escape(named)):
        load(quantized)


def test_the_fp8_override_and_status_name(tmp_path):
    quantized, _ = write_hf_fp8_pair(tmp_path, "llama", (128, 128))
    hf_config = load_hf_config(quantized)
    assert checked_quantization_config(hf_config, "fp8") is not None
    with pytest.raises(InvalidParameterError, match="quantized with fp8, not awq"):
        checked_quantization_config(hf_config, "awq")
    assert quantization_name(hf_config) == "fp8 fp8-block128x128"
    assert quantization_name(hf_config, "dequantize") == "fp8 fp8-block128x128 (dequantized)"


# Shapes must be whole multiples of the blocks here: transformers' CPU dequantization
# (`Fp8Dequantize._dequantize_one`) derives the block from the scale grid and refuses
# weights the grid does not divide, so edge blocks are checked against the dense model only.
@requires_accelerate
@pytest.mark.parametrize(
    "arch, block, activation_scheme",
    [
        ("llama", (32, 32), "dynamic"),
        ("llama", None, "dynamic"),
        ("qwen3", (32, 32), "static"),
        ("qwen3_moe", (32, 32), "dynamic"),
    ],
)
def test_greedy_tokens_match_transformers_on_the_same_fp8_checkpoint(
    tmp_path, arch, block, activation_scheme
):
    quantized, _ = write_hf_fp8_pair(tmp_path, arch, block, activation_scheme)
    check_greedy_tokens_against_hf(quantized, WEIGHT_ONLY_NEAR_TIE)


@pytest.mark.parametrize("arch", ["qwen3_moe", "mixtral"])
def test_fp8_experts_are_dequantized_into_the_stacked_weights(tmp_path, arch):
    """Routed experts are slices of FusedMoE's stacked parameters, not linears: their fp8
    tensors are read like a linear's and loaded dense (Mixtral's w1/w2/w3 renamed)."""
    quantized, reference = write_hf_fp8_pair(tmp_path, arch, (32, 32))
    model, _ = load_llmd(quantized)
    experts = next(module for module in model.modules() if isinstance(module, FusedMoE))
    dense = load_file(str(reference / "model.safetensors"))
    name = EXPERT if arch == "qwen3_moe" else "model.layers.0.block_sparse_moe.experts.3.w2"
    assert torch.equal(experts.down_proj[3], dense[f"{name}.weight"])
    assert max_logit_error(quantized, reference, seed=3) < LOGITS_ATOL[torch.float32]


def test_compressed_tensors_experts_are_dequantized_too(tmp_path):
    """Before, an expert's `weight_packed` had 'no counterpart' in the MoE model."""
    quantized, reference = write_quantized_pair(tmp_path, "qwen3_moe", "w4a16-g32")
    # llm-compressor's MoE recipes leave the routers dense, as this writer does.
    edit_config(quantized, lambda config: config["ignore"].append("re:.*mlp\\.gate$"))
    assert f"{EXPERT}.weight_packed" in load_file(str(quantized / "model.safetensors"))
    assert max_logit_error(quantized, reference, seed=4) < LOGITS_ATOL[torch.float32]


def test_a_missing_expert_scale_is_named(tmp_path):
    quantized, _ = write_hf_fp8_pair(tmp_path, "qwen3_moe", (32, 32))
    edit_tensors(quantized, lambda t: t.pop(f"{EXPERT}.weight_scale_inv"))
    named = re.escape(f"missing '{EXPERT}.weight_scale_inv'")
    with pytest.raises(UnsupportedQuantizationError, match=named):
        load(quantized)


def test_a_quantized_router_the_config_does_not_skip_is_refused_by_name(tmp_path):
    """transformers never converts a router, so a quantized one is a broken checkpoint."""
    quantized, _ = write_hf_fp8_pair(tmp_path, "qwen3_moe", (32, 32))
    router = "model.layers.0.mlp.gate"
    edit_tensors(quantized, lambda t: t.update({f"{router}.weight_scale_inv": torch.ones(1, 2)}))
    with pytest.raises(UnsupportedModelError, match=re.escape(f"'{router}.weight_scale_inv'")):
        load(quantized)


def test_the_writer_matches_transformers_dequantization():
    """transformers' own `Fp8Dequantize` reads the writer's tensors into the same weight."""
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize

    from tests.hf_fp8_checkpoint import quantize_blocks

    weight = torch.randn(96, 128, generator=torch.Generator().manual_seed(3)) * 0.1
    for block in ((32, 64), None):
        codes, scale_inv, dequantized = quantize_blocks(weight, block)
        theirs = Fp8Dequantize(None)._dequantize_one(codes, scale_inv, torch.float32)
        assert torch.equal(theirs, dequantized)
