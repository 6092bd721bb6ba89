"""Writes tiny quantized checkpoints in compressed-tensors, AWQ and GPTQ's on-disk formats.

Tests must not need llm-compressor, so each format is written here from its published
layout (packing, offsets, names, config keys) with its own packing code, independent of
llmd's readers; next to each quantized checkpoint goes a dense one holding exactly the
weights the codes stand for, which HF transformers loads as the reference.
"""

from __future__ import annotations

import json
import pathlib
import shutil
from dataclasses import dataclass

import torch
from safetensors.torch import load_file, save_file

from tests.checkpoints import make_tiny_checkpoint

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


@dataclass(frozen=True)
class Recipe:
    """One scheme to write: its method, format and quantization parameters."""

    method: str  # "compressed-tensors", "awq", "gptq"
    format: str = "pack-quantized"
    num_bits: int = 4
    is_float: bool = False
    strategy: str = "group"
    group_size: int | None = 32
    block: tuple[int, int] | None = None
    is_symmetric: bool = True
    act_order: bool = False
    has_input_activations: bool = False
    quantizes_head: bool = False
    """Quantize lm_head too (compressed-tensors without "lm_head" in `ignore`)."""


RECIPES: dict[str, Recipe] = {
    "w4a16-g32": Recipe("compressed-tensors"),
    "w4a16-asym-g32": Recipe("compressed-tensors", is_symmetric=False),
    "w4a16-channel": Recipe("compressed-tensors", strategy="channel", group_size=None),
    "w8a16-channel": Recipe("compressed-tensors", num_bits=8, strategy="channel", group_size=None),
    "w8a16-naive": Recipe(
        "compressed-tensors", "naive-quantized", 8, strategy="channel", group_size=None
    ),
    "w8a8-int": Recipe(
        "compressed-tensors", "int-quantized", 8, strategy="channel", group_size=None,
        has_input_activations=True,
    ),
    "fp8-tensor": Recipe(
        "compressed-tensors", "float-quantized", 8, True, "tensor", None,
        has_input_activations=True,
    ),
    "fp8-channel": Recipe(
        "compressed-tensors", "float-quantized", 8, True, "channel", None,
        has_input_activations=True,
    ),
    "fp8-block": Recipe(
        "compressed-tensors", "float-quantized", 8, True, "block", None, (32, 64),
        has_input_activations=True,
    ),
    "awq-g32": Recipe("awq", "awq-gemm", is_symmetric=False),
    "gptq-g32": Recipe("gptq", "gptq"),
    "gptq-act-order-g32": Recipe("gptq", "gptq", act_order=True),
    "gptq-channel": Recipe("gptq", "gptq", strategy="channel", group_size=None),
}  # fmt: skip


def write_quantized_pair(
    root: pathlib.Path,
    arch: str,
    recipe: str | Recipe,
    seed: int = 0,
    dense_source: pathlib.Path | None = None,
    write_reference: bool = True,
    **config_overrides: object,
) -> tuple[pathlib.Path, pathlib.Path]:
    """(quantized checkpoint, dense checkpoint of its dequantized weights) of a tiny `arch`,
    or of `dense_source` (its tokenizer files copied along), under `root`."""
    recipe = RECIPES[recipe] if isinstance(recipe, str) else recipe
    if dense_source is None:
        dense_source = make_tiny_checkpoint(arch, root / "source", seed=seed, **config_overrides)
    quantized, reference = root / "quantized", root / "reference"
    ignored = ("*.safetensors", "*.safetensors.index.json")
    for target in (quantized, reference) if write_reference else (quantized,):
        shutil.copytree(dense_source, target, ignore=shutil.ignore_patterns(*ignored))
    quantized_tensors, reference_tensors = {}, {}
    for file in sorted(dense_source.glob("*.safetensors")):
        for name, tensor in load_file(str(file)).items():
            module = name.removesuffix(".weight")
            is_head = name == "lm_head.weight" and recipe.quantizes_head
            if not is_head and not (
                name.endswith(".weight") and module.rsplit(".", 1)[-1] in PROJECTIONS
            ):
                quantized_tensors[name] = reference_tensors[name] = tensor
                continue
            # Act-order permutes by the input's statistics: q/k/v (and gate/up) share one.
            input_name = module.replace("k_proj", "q_proj").replace("v_proj", "q_proj")
            input_name = input_name.replace("up_proj", "gate_proj")
            generator = torch.Generator().manual_seed(seed + sum(map(ord, input_name)))
            stored, dequantized = quantize_module(tensor.float(), recipe, generator)
            quantized_tensors.update({f"{module}.{key}": value for key, value in stored.items()})
            reference_tensors[name] = dequantized
    save_file(quantized_tensors, str(quantized / "model.safetensors"), {"format": "pt"})
    if write_reference:
        save_file(reference_tensors, str(reference / "model.safetensors"), {"format": "pt"})
    config = json.loads((quantized / "config.json").read_text())
    config["quantization_config"] = quantization_config(recipe)
    (quantized / "config.json").write_text(json.dumps(config, indent=2))
    return quantized, reference


def quantize_module(weight: torch.Tensor, recipe: Recipe, generator: torch.Generator):
    """({suffix: tensor} in the recipe's format, the [N, K] float32 weight they stand for)."""
    if recipe.is_float:
        return quantize_fp8(weight, recipe)
    out_features, in_features = weight.shape
    group_size = recipe.group_size or in_features
    group_ids = torch.arange(in_features) // group_size
    if recipe.act_order:
        rank = torch.argsort(torch.randperm(in_features, generator=generator))
        group_ids = rank // group_size
    codes, scales, zeros = quantize_int(weight, recipe.num_bits, group_ids, recipe.is_symmetric)
    offset = 1 << (recipe.num_bits - 1)
    dequantized = (codes.float() - zeros[:, group_ids].float()) * scales[:, group_ids].float()
    scale_dtype = torch.float16 if recipe.method in ("awq", "gptq") else torch.bfloat16
    assert torch.equal(scales, scales.to(scale_dtype).float())
    if recipe.method == "awq":
        unsigned = (codes + offset).t()  # [K, N]
        return {
            "qweight": pack_words(unsigned, 4, AWQ_ORDER),
            "qzeros": pack_words((zeros + offset).t(), 4, AWQ_ORDER),
            "scales": scales.t().to(scale_dtype).contiguous(),
        }, dequantized
    if recipe.method == "gptq":
        stored_zeros = (zeros + offset - 1).t()  # v1 format: zero point minus one
        return {
            "qweight": pack_words(codes + offset, 4).t().contiguous(),  # [K / 8, N]
            "qzeros": pack_words(stored_zeros, 4),
            "scales": scales.t().to(scale_dtype).contiguous(),
            "g_idx": group_ids.to(torch.int32),
        }, dequantized
    stored = {"weight_scale": scales.to(scale_dtype)}
    if recipe.format == "pack-quantized":
        stored["weight_packed"] = pack_words(codes + offset, recipe.num_bits)
        stored["weight_shape"] = torch.tensor([out_features, in_features])
        if not recipe.is_symmetric:
            stored["weight_zero_point"] = pack_words((zeros + offset).t(), recipe.num_bits).t()
    else:
        stored["weight"] = codes.to(torch.int8)
        if not recipe.is_symmetric:
            stored["weight_zero_point"] = zeros.to(torch.int8)
    return {key: value.contiguous() for key, value in stored.items()}, dequantized


def quantize_int(weight, num_bits: int, group_ids: torch.Tensor, is_symmetric: bool):
    """Min-max codes (signed) [N, K], bf16/fp16-exact scales [N, G], signed zeros [N, G]."""
    num_groups = int(group_ids.max()) + 1
    out_features = weight.shape[0]
    scales = torch.empty(out_features, num_groups)
    zeros = torch.zeros(out_features, num_groups, dtype=torch.int64)
    low, high = -(1 << (num_bits - 1)), (1 << (num_bits - 1)) - 1
    for group in range(num_groups):
        columns = weight[:, group_ids == group]
        if is_symmetric:
            scale = columns.abs().amax(dim=1) / high
        else:
            scale = (columns.amax(dim=1) - columns.amin(dim=1)) / (high - low)
        scales[:, group] = scale.to(torch.bfloat16).float()  # exact in bf16 and fp16
        if not is_symmetric:
            zero = low - torch.round(columns.amin(dim=1) / scales[:, group])
            zeros[:, group] = zero.clamp(low, high).long()
    full_scales, full_zeros = scales[:, group_ids], zeros[:, group_ids]
    codes = torch.round(weight / full_scales) + full_zeros
    return codes.clamp(low, high).long(), scales, zeros


def quantize_fp8(weight: torch.Tensor, recipe: Recipe):
    """({"weight": fp8, "weight_scale": ...}, dequantized) per tensor, row or block."""
    out_features, in_features = weight.shape
    if recipe.strategy == "tensor":
        scale = (weight.abs().amax() / 448.0).reshape(1)
        full = scale.expand(out_features, in_features)
    elif recipe.strategy == "channel":
        scale = weight.abs().amax(dim=1, keepdim=True) / 448.0
        full = scale.expand(out_features, in_features)
    else:
        rows, cols = recipe.block or (128, 128)
        grid = (-(-out_features // rows), -(-in_features // cols))
        scale = torch.empty(grid)
        for i in range(grid[0]):
            for j in range(grid[1]):
                block = weight[i * rows : (i + 1) * rows, j * cols : (j + 1) * cols]
                scale[i, j] = block.abs().amax() / 448.0
        full = scale.repeat_interleave(rows, 0)[:out_features].repeat_interleave(cols, 1)
        full = full[:, :in_features]
    scale = scale.to(torch.bfloat16)
    full = full.to(torch.bfloat16).float()
    codes = (weight / full).to(torch.float8_e4m3fn)
    return {"weight": codes, "weight_scale": scale.contiguous()}, codes.float() * full


def pack_words(unsigned: torch.Tensor, num_bits: int, order=None) -> torch.Tensor:
    """[R, C] codes in 0..2^bits-1 -> [R, C * bits / 32] int32, field i = code order[i]."""
    per_word = 32 // num_bits
    rows, cols = unsigned.shape
    padded = torch.nn.functional.pad(unsigned.long(), (0, -cols % per_word))
    groups = padded.reshape(rows, -1, per_word)
    if order is not None:
        groups = groups[..., list(order)]
    words = torch.zeros(rows, groups.shape[1], dtype=torch.int64)
    for field in range(per_word):
        words |= groups[..., field] << (num_bits * field)
    return torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)


def quantization_config(recipe: Recipe) -> dict:
    """The config.json `quantization_config` the recipe's tools write."""
    if recipe.method == "awq":
        return {"quant_method": "awq", "bits": 4, "group_size": recipe.group_size,
                "zero_point": True, "version": "gemm", "modules_to_not_convert": None}  # fmt: skip
    if recipe.method == "gptq":
        return {"quant_method": "gptq", "bits": 4, "group_size": recipe.group_size or -1,
                "desc_act": recipe.act_order, "sym": True, "checkpoint_format": "gptq",
                "damp_percent": 0.01, "true_sequential": True}  # fmt: skip
    weights = {
        "num_bits": recipe.num_bits,
        "type": "float" if recipe.is_float else "int",
        "symmetric": recipe.is_symmetric,
        "strategy": recipe.strategy,
        "group_size": recipe.group_size,
        "block_structure": list(recipe.block) if recipe.block else None,
        "dynamic": False,
        "actorder": None,
    }
    activations = None
    if recipe.has_input_activations:
        activations = {"num_bits": 8, "type": "float" if recipe.is_float else "int",
                       "symmetric": True, "strategy": "token", "dynamic": True}  # fmt: skip
    group = {"targets": ["Linear"], "weights": weights, "input_activations": activations,
             "output_activations": None, "format": recipe.format}  # fmt: skip
    return {
        "quant_method": "compressed-tensors",
        "format": recipe.format,
        "config_groups": {"group_0": group},
        "ignore": [] if recipe.quantizes_head else ["lm_head"],
        "kv_cache_scheme": None,
        "quantization_status": "compressed",
        "sparsity_config": {},
        "transform_config": {},
        "global_compression_ratio": None,
    }
