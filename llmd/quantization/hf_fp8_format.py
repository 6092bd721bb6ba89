"""Reads one linear's tensors in transformers' own FP8 format (`quant_method: "fp8"`).

Qwen's Qwen3-*-FP8 and DeepSeek-V3-style checkpoints store `weight` as float8_e4m3fn
[N, K] and `weight_scale_inv` as float32 [ceil(N / bn), ceil(K / bk)] for the config's
`weight_block_size` [bn, bk] (a 0-d scalar when it is null), w = weight * weight_scale_inv
over each block with the edge blocks cut short (transformers' `FP8Linear` and
`_dequantize_fp8_weight`); a static `activation_scheme` adds a scalar `activation_scale`
per linear, read and unused like compressed-tensors' `input_scale`: llmd's CPU layers are
weight-only and its CUDA `Fp8Linear` scales activations per token.
"""

from __future__ import annotations

from llmd.quantization.compressed_tensors_format import read_fp8
from llmd.quantization.fp8_linear import Fp8Weight
from llmd.quantization.module_tensors import ModuleTensors
from llmd.quantization.weight_scheme import WeightScheme

SCALE = "weight_scale_inv"
"""The multiplier of the codes (transformers names it the inverse of the quantizing scale)."""
TENSOR_SUFFIXES = ("weight", SCALE, "activation_scale")
"""What transformers' FP8 format stores for a converted linear."""


def read_hf_fp8(tensors: ModuleTensors, scheme: WeightScheme) -> Fp8Weight:
    """The layer's e4m3 codes with their scales: row scales when one scale covers the
    tensor (so `Fp8Linear` can take it on CUDA), else blocks, dense for every other use."""
    return read_fp8(tensors, scheme, SCALE)
