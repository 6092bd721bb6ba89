"""Bad quantized checkpoints get one typed error naming the method, field or tensor."""

from __future__ import annotations

import json
import re
import types

import pytest
import torch
from safetensors.torch import load_file, save_file

from llmd.attention.torch_backend import TorchAttentionBackend
from llmd.errors import UnsupportedModelError, UnsupportedQuantizationError
from llmd.models.loader import load_hf_config, load_model
from llmd.quantization.quant_config import quantization_name, read_quantization_config
from tests.quantized_checkpoints import write_quantized_pair


def load(path):
    return load_model(
        path, load_hf_config(path), TorchAttentionBackend(), torch.float32, torch.device("cpu")
    )


def edit_config(path, edit) -> None:
    config = json.loads((path / "config.json").read_text())
    edit(config["quantization_config"])
    (path / "config.json").write_text(json.dumps(config))


def edit_tensors(path, edit) -> None:
    tensors = load_file(str(path / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(path / "model.safetensors"))


def test_an_unsupported_method_is_named(tmp_path):
    quantized, _ = write_quantized_pair(tmp_path, "llama", "w4a16-g32")
    edit_config(quantized, lambda config: config.update(quant_method="bitsandbytes"))
    with pytest.raises(UnsupportedQuantizationError, match="'bitsandbytes'") as error:
        load(quantized)
    assert isinstance(error.value, UnsupportedModelError)  # caught wherever a model is refused
    assert "compressed-tensors, awq, gptq" in str(error.value)


@pytest.mark.parametrize(
    "recipe, edit, named",
    [
        ("w4a16-g32", lambda c: c["config_groups"]["group_0"].update(format="nvfp4-pack-quantized"),
         "nvfp4-pack-quantized"),
        ("w4a16-g32", lambda c: c["config_groups"]["group_0"]["weights"].update(num_bits=2),
         "int2"),
        ("w4a16-g32", lambda c: c.update(quantization_status="frozen"), "quantization_status"),
        ("w4a16-g32", lambda c: c.update(sparsity_config={"format": "sparse-24-bitmask"}),
         "sparse-24-bitmask"),
        ("awq-g32", lambda c: c.update(version="gemv"), "version"),
        ("gptq-g32", lambda c: c.update(bits=8), "bits"),
        ("gptq-g32", lambda c: c.update(checkpoint_format="marlin"), "marlin"),
    ],
)  # fmt: skip
def test_unsupported_formats_and_schemes_name_the_field(tmp_path, recipe, edit, named):
    quantized, _ = write_quantized_pair(tmp_path, "llama", recipe)
    edit_config(quantized, edit)
    with pytest.raises(UnsupportedQuantizationError, match=re.escape(named)):
        load(quantized)


Q_PROJ = "model.layers.1.self_attn.q_proj"


@pytest.mark.parametrize(
    "recipe, edit, named",
    [
        ("w4a16-g32", lambda t: t.pop(f"{Q_PROJ}.weight_scale"), f"'{Q_PROJ}.weight_scale'"),
        ("w4a16-g32", lambda t: t.update({f"{Q_PROJ}.weight_packed":
                                          t[f"{Q_PROJ}.weight_packed"][:, :-1].contiguous()}),
         f"'{Q_PROJ}.weight_packed' has shape"),
        ("w4a16-g32", lambda t: t.update({f"{Q_PROJ}.weight_shape": torch.tensor([64, 32])}),
         f"'{Q_PROJ}.weight_shape'"),
        ("w4a16-g32", lambda t: t.update({f"{Q_PROJ}.weight_packed":
                                          t[f"{Q_PROJ}.weight_packed"].long()}),
         "is int64, expected int32"),
        ("w4a16-asym-g32", lambda t: t.pop(f"{Q_PROJ}.weight_zero_point"),
         f"'{Q_PROJ}.weight_zero_point'"),
        ("fp8-block", lambda t: t.update({f"{Q_PROJ}.weight_scale":
                                          t[f"{Q_PROJ}.weight_scale"][:1].contiguous()}),
         f"'{Q_PROJ}.weight_scale' has shape"),
        ("awq-g32", lambda t: t.pop(f"{Q_PROJ}.qzeros"), f"'{Q_PROJ}.qzeros'"),
        ("gptq-g32", lambda t: t.update({f"{Q_PROJ}.g_idx": t[f"{Q_PROJ}.g_idx"] + 5}),
         f"'{Q_PROJ}.g_idx' holds groups outside"),
    ],
)  # fmt: skip
def test_missing_or_misshapen_tensors_are_named(tmp_path, recipe, edit, named):
    quantized, _ = write_quantized_pair(tmp_path, "llama", recipe)
    edit_tensors(quantized, edit)
    with pytest.raises(UnsupportedQuantizationError, match=re.escape(named)):
        load(quantized)


def test_a_quantized_tensor_of_a_dense_module_is_refused_by_name(tmp_path):
    quantized, _ = write_quantized_pair(tmp_path, "llama", "w8a16-channel")
    edit_tensors(quantized, lambda t: t.update({"lm_head.weight_scale": torch.ones(512, 1)}))
    with pytest.raises(UnsupportedModelError, match=re.escape("'lm_head.weight_scale'")):
        load(quantized)


def config_of(quantization_config: dict):
    return read_quantization_config(types.SimpleNamespace(quantization_config=quantization_config))


def test_targets_and_ignore_follow_compressed_tensors_matching():
    weights = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}
    config = config_of({
        "quant_method": "compressed-tensors", "format": "pack-quantized",
        "config_groups": {
            "attention": {"targets": ["re:.*self_attn\\..*_proj$"], "weights": weights},
            "rest": {"targets": ["Linear"], "weights": {**weights, "num_bits": 8,
                                                        "strategy": "channel"}},
        },
        "ignore": ["lm_head", "re:.*layers\\.0\\.mlp\\.down_proj"],
    })  # fmt: skip
    assert config is not None
    attention = config.scheme_for("model.layers.3.self_attn.k_proj")
    assert attention is not None and attention.name == "w4a16-g128"
    mlp = config.scheme_for("model.layers.3.mlp.up_proj")
    assert mlp is not None and mlp.name == "w8a16"
    assert config.scheme_for("lm_head") is None
    assert config.scheme_for("model.layers.0.mlp.down_proj") is None
    assert config.name == "compressed-tensors w4a16-g128+w8a16"


def test_dense_configs_have_no_quantization_and_awq_skips_named_modules():
    assert read_quantization_config(types.SimpleNamespace()) is None
    config = config_of({"quant_method": "awq", "bits": 4, "group_size": 64, "version": "GEMM",
                        "modules_to_not_convert": ["down_proj"]})  # fmt: skip
    assert config is not None and config.name == "awq w4a16-g64"
    assert config.scheme_for("model.layers.2.mlp.down_proj") is None
    assert config.scheme_for("model.layers.2.mlp.up_proj") is not None
    assert config.scheme_for("lm_head") is None


def test_the_quantization_override_must_match_the_checkpoint(tmp_path):
    from llmd.config import EngineConfig
    from llmd.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="quantization: must be one of auto"):
        EngineConfig(model="m", quantization="bitsandbytes")
    quantized, reference = write_quantized_pair(tmp_path, "llama", "w4a16-g32")
    backend, cpu = TorchAttentionBackend(), torch.device("cpu")
    hf_config = load_hf_config(quantized)
    with pytest.raises(InvalidParameterError, match="quantized with compressed-tensors, not awq"):
        load_model(quantized, hf_config, backend, torch.float32, cpu, "awq")
    with pytest.raises(InvalidParameterError, match="dequantize needs a quantized checkpoint"):
        load_model(reference, load_hf_config(reference), backend, torch.float32, cpu, "dequantize")
    model = load_model(quantized, hf_config, backend, torch.float32, cpu, "compressed-tensors")
    assert type(model.model.layers[0].mlp.down_proj).__name__ == "Int4Linear"
    dense = load_model(quantized, hf_config, backend, torch.float32, cpu, "dequantize")
    down = dense.model.layers[0].mlp.down_proj
    assert type(down) is torch.nn.Linear
    reference_weight = load_file(str(reference / "model.safetensors"))
    expected = reference_weight["model.layers.0.mlp.down_proj.weight"]
    assert torch.equal(down.weight, expected)  # the codes times their scales, exactly
    assert (
        quantization_name(hf_config, "dequantize") == "compressed-tensors w4a16-g32 (dequantized)"
    )
