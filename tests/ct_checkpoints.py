"""Tiny checkpoints quantized and saved by compressed-tensors' own code, as llm-compressor does.

llm-compressor cannot be installed next to the pinned transformers, so its save path is
followed with compressed-tensors' public API alone: attach a preset scheme, fill the
weights' scales by min-max (llm-compressor's default observer), compress, save, write the
config. Next to each goes a dense checkpoint of the weights compressed-tensors' decompressor
reads back from the saved files (equal to its fake-quantized weights), which HF runs as the
reference. Nothing here shares code with llmd's readers or tests/quantized_checkpoints.py.
"""

from __future__ import annotations

import pathlib
import shutil
from dataclasses import dataclass, field

import torch
from safetensors.torch import load_file, save_file

from tests.checkpoints import make_tiny_checkpoint


@dataclass(frozen=True)
class CtScheme:
    """A compressed-tensors preset, with the weight arguments a tiny model needs changed."""

    preset: str
    weight_overrides: dict = field(default_factory=dict)
    activation_overrides: dict = field(default_factory=dict)


CT_SCHEMES: dict[str, CtScheme] = {
    "w4a16-g32": CtScheme("W4A16", {"group_size": 32}),
    "w4a16-asym-g32": CtScheme("W4A16_ASYM", {"group_size": 32}),
    "w8a16-channel": CtScheme("W8A16", {"strategy": "channel", "group_size": None}),
    "w8a8-int": CtScheme("W8A8"),
    "fp8-tensor": CtScheme("FP8_DYNAMIC", {"strategy": "tensor"}),
    "fp8-channel": CtScheme("FP8_DYNAMIC"),
    "fp8-block": CtScheme("FP8_BLOCK", {"block_structure": [32, 64]}, {"group_size": 64}),
}
"""Group size 32 and 32x64 blocks (presets: 128 and 128x128) divide the tiny models' 64-wide
projections; the blocks are not square, so a swapped row and column reading shows."""


def write_ct_checkpoint(
    root: pathlib.Path, arch: str, scheme_name: str, seed: int = 0
) -> tuple[pathlib.Path, pathlib.Path]:
    """(checkpoint compressed-tensors wrote, dense checkpoint of its fake-quantized weights)
    of a tiny random `arch` under `root`; the second is the reference that HF can run."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config
    from transformers import AutoModelForCausalLM

    source = make_tiny_checkpoint(arch, root / "source", seed=seed)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    config = QuantizationConfig(
        config_groups={"group_0": preset_scheme(CT_SCHEMES[scheme_name])}, ignore=["lm_head"]
    )
    apply_quantization_config(model, config)
    fake_quantized = {}
    for name, module in model.named_modules():
        scheme = getattr(module, "quantization_scheme", None)
        if scheme is not None:
            fake_quantized[name] = calibrate_weight(module, scheme.weights)
    schemes = {name: model.get_submodule(name).quantization_scheme for name in fake_quantized}
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    quantized = root / "quantized"
    model.save_pretrained(quantized)
    compressor.update_config(quantized)
    reference = root / "reference"
    shutil.copytree(source, reference, ignore=shutil.ignore_patterns("*.safetensors"))
    tensors = load_file(str(source / "model.safetensors"))
    for name, weight in decompress_checkpoint(quantized, schemes).items():
        # The checkpoint's own tensors stand for exactly the fake-quantized weights.
        assert torch.equal(weight, fake_quantized[name]), name
        tensors[f"{name}.weight"] = weight
    save_file(tensors, str(reference / "model.safetensors"), {"format": "pt"})
    return quantized, reference


def preset_scheme(scheme: CtScheme):
    """compressed-tensors' QuantizationScheme of the preset, targeting every Linear."""
    from compressed_tensors.quantization import QuantizationArgs, preset_name_to_scheme

    preset = preset_name_to_scheme(scheme.preset, ["Linear"])
    weights = {**preset.weights.model_dump(), **scheme.weight_overrides}
    update = {"weights": QuantizationArgs.model_validate(weights)}
    if scheme.activation_overrides:
        activations = {**preset.input_activations.model_dump(), **scheme.activation_overrides}
        update["input_activations"] = QuantizationArgs.model_validate(activations)
    return type(preset).model_validate({**dict(preset), **update})


def calibrate_weight(module: torch.nn.Linear, args) -> torch.Tensor:
    """Set the module's weight scale (and zero point) by min-max; its fake-quantized weight."""
    from compressed_tensors.quantization import fake_quantize
    from compressed_tensors.quantization.utils import calculate_qparams

    weight = module.weight.detach()  # [N, K]
    if args.strategy == "tensor":
        spans = weight.reshape(1, -1)  # [1, N * K]
    elif args.strategy == "channel":
        spans = weight  # [N, K]
    elif args.strategy == "group":
        spans = weight.unflatten(1, (-1, args.group_size))  # [N, G, group_size]
    else:
        rows, cols = args.block_structure
        blocks = weight.unflatten(0, (-1, rows)).unflatten(2, (-1, cols))  # [N/r, r, K/c, c]
        spans = blocks.transpose(1, 2).flatten(2)  # [N/r, K/c, r * c]
    scale, zero_point = calculate_qparams(spans.amin(-1), spans.amax(-1), args)
    stored_zero_point = getattr(module, "weight_zero_point", None)
    with torch.no_grad():
        module.weight_scale.copy_(scale.reshape(module.weight_scale.shape))
        if stored_zero_point is not None:
            stored_zero_point.copy_(zero_point.reshape(stored_zero_point.shape))
    return fake_quantize(weight, module.weight_scale, stored_zero_point, args)


def decompress_checkpoint(path: pathlib.Path, schemes: dict) -> dict[str, torch.Tensor]:
    """{module: float32 weight} that compressed-tensors' decompressor reads from the files."""
    from compressed_tensors.compressors import BaseCompressor

    stored = {}
    for file in sorted(path.glob("*.safetensors")):
        stored.update(load_file(str(file)))
    weights = {}
    for name, scheme in schemes.items():
        local = {
            key.removeprefix(f"{name}."): tensor
            for key, tensor in stored.items()
            if key.startswith(f"{name}.")
        }
        compressor = BaseCompressor.get_value_from_registry(scheme.format.value)
        weights[name] = compressor.decompress(local, scheme)["weight"].float()
    return weights
