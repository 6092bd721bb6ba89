"""Writes tiny checkpoints in HF transformers' own FP8 format (`quant_method: "fp8"`).

This is the format of Qwen's Qwen3-*-FP8 and DeepSeek-V3's checkpoints, which
transformers' `FineGrainedFP8HfQuantizer` reads: each converted linear (and each routed
expert's projection) stores `weight` as float8_e4m3fn [N, K] and `weight_scale_inv` as
float32 [ceil(N / bn), ceil(K / bk)] for `weight_block_size` [bn, bk] (a 0-d scalar when
it is null), w = weight * weight_scale_inv over each block, edge blocks cut short; a
static `activation_scheme` adds a scalar `activation_scale`. Written here from that
layout, independent of llmd's reader; next to it goes a dense checkpoint of exactly the
weights the codes stand for, which HF transformers loads as the reference.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import torch
from safetensors.torch import load_file, save_file

from tests.checkpoints import make_tiny_checkpoint

FP8_MAX = 448.0
CONVERTED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
             "w1", "w2", "w3", "shared_expert_gate")  # fmt: skip
"""The linears transformers turns into `FP8Linear` (or `FP8Experts`) in the tiny models:
every `nn.Linear` but the output head; MoE routers are no `nn.Linear` there."""
ACTIVATION_SCALE = 0.0125
"""The static scheme's per-tensor input scale (any positive number: llmd reads none)."""


def write_hf_fp8_pair(
    root: pathlib.Path,
    arch: str,
    block: tuple[int, int] | None = (128, 128),
    activation_scheme: str = "dynamic",
    modules_to_not_convert: list[str] | None = None,
    seed: int = 0,
    **config_overrides: object,
) -> tuple[pathlib.Path, pathlib.Path]:
    """(fp8 checkpoint, dense checkpoint of its dequantized weights) of a tiny `arch` under
    `root`, `block` scales ([rows, columns], or None: one scale per tensor)."""
    source = make_tiny_checkpoint(arch, root / "source", seed=seed, **config_overrides)
    quantized, reference = root / "quantized", root / "reference"
    for target in (quantized, reference):
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.safetensors*"))
    quantized_tensors, reference_tensors = {}, {}
    for name, tensor in load_file(str(source / "model.safetensors")).items():
        module = name.removesuffix(".weight")
        skipped = any(  # transformers' rule, for literal names: a prefix or a suffix
            module.startswith(f"{skip}.") or module.endswith(skip)
            for skip in modules_to_not_convert or ()
        )
        if skipped or not name.endswith(".weight") or module.rsplit(".", 1)[-1] not in CONVERTED:
            quantized_tensors[name] = reference_tensors[name] = tensor
            continue
        codes, scale_inv, dequantized = quantize_blocks(tensor.float(), block)
        quantized_tensors[name] = codes
        quantized_tensors[f"{module}.weight_scale_inv"] = scale_inv
        if activation_scheme == "static":
            quantized_tensors[f"{module}.activation_scale"] = torch.tensor(ACTIVATION_SCALE)
        reference_tensors[name] = dequantized
    save_file(quantized_tensors, str(quantized / "model.safetensors"), {"format": "pt"})
    save_file(reference_tensors, str(reference / "model.safetensors"), {"format": "pt"})
    config = json.loads((quantized / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": activation_scheme,
        "weight_block_size": list(block) if block else None,
        **({"modules_to_not_convert": modules_to_not_convert} if modules_to_not_convert else {}),
    }
    (quantized / "config.json").write_text(json.dumps(config, indent=2))
    return quantized, reference


def quantize_blocks(
    weight: torch.Tensor, block: tuple[int, int] | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(e4m3 codes [N, K], float32 scale_inv per block, the [N, K] weight they stand for):
    absmax scales, one block at a time so that edge blocks are simply shorter."""
    if block is None:
        scale_inv = weight.abs().amax() / FP8_MAX
        codes = (weight / scale_inv).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        return codes, scale_inv.float(), codes.float() * scale_inv
    rows, cols = block
    out_features, in_features = weight.shape
    grid = (-(-out_features // rows), -(-in_features // cols))
    scale_inv = torch.empty(grid, dtype=torch.float32)
    codes = torch.empty(weight.shape, dtype=torch.float8_e4m3fn)
    dequantized = torch.empty_like(weight)
    for i in range(grid[0]):
        for j in range(grid[1]):
            tile = (slice(i * rows, (i + 1) * rows), slice(j * cols, (j + 1) * cols))
            scale_inv[i, j] = weight[tile].abs().amax() / FP8_MAX
            scaled = (weight[tile] / scale_inv[i, j]).clamp(-FP8_MAX, FP8_MAX)
            codes[tile] = scaled.to(torch.float8_e4m3fn)
            dequantized[tile] = codes[tile].float() * scale_inv[i, j]
    return codes, scale_inv, dequantized
