"""`Fp8Linear` (W8A8 on `torch._scaled_mm`) against its reference, on the CPU build of
`_scaled_mm`; on a CUDA sm_89+ device, a tiny fp8 checkpoint end to end (skipped here)."""

from __future__ import annotations

import pytest
import torch

from llmd.attention.torch_backend import TorchAttentionBackend
from llmd.models.loader import load_hf_config, load_model
from llmd.quantization.fp8_linear import Fp8Linear, Fp8Weight, can_run_fp8, fp8_reference
from llmd.quantization.linear_builder import build_linear
from tests.quantization.test_quantized_models import hf_reference_logits, llmd_logits, prompt
from tests.quantized_checkpoints import write_quantized_pair

FP8_RELATIVE_TOLERANCE = 2e-2
"""|layer - reference| / max |reference|: both quantize activations alike; the GEMM's
accumulation order and bf16 output rounding remain."""


def fp8_weight(out_features: int, in_features: int, seed: int) -> Fp8Weight:
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(out_features, in_features, generator=generator) * 0.1
    scales = weight.abs().amax(dim=1) / 448.0
    codes = (weight / scales[:, None]).to(torch.float8_e4m3fn)
    return Fp8Weight(codes=codes, row_scales=scales, dense=codes.float() * scales[:, None])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fp8_linear_matches_its_reference(dtype):
    shards = [fp8_weight(32, 64, 1), fp8_weight(16, 64, 2)]  # a fused pair, own scales
    bias = torch.randn(48)
    layer = Fp8Linear(shards, bias, dtype)
    hidden = torch.randn(7, 64, generator=torch.Generator().manual_seed(3)).to(dtype)
    got = layer(hidden)
    expected = fp8_reference(hidden, shards, bias)
    assert got.dtype == dtype and got.shape == (7, 48)
    error = (got.float() - expected).abs().max() / expected.abs().max()
    assert error.item() < FP8_RELATIVE_TOLERANCE


def test_fp8_runs_on_cuda_only_with_row_scales_and_aligned_dims():
    aligned, cuda = fp8_weight(32, 64, 1), torch.device("cuda")
    assert not can_run_fp8([aligned], torch.device("cpu"))
    block = Fp8Weight(aligned.codes, None, aligned.dense)
    assert not can_run_fp8([block], cuda)
    assert not can_run_fp8([fp8_weight(24, 64, 1)], cuda)  # 24 rows: not a multiple of 16
    layer, kind = build_linear([aligned], None, torch.float32, torch.device("cpu"))
    assert kind == "dense" and torch.equal(layer.weight, aligned.dense)


def is_fp8_cuda() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


@pytest.mark.skipif(not is_fp8_cuda(), reason="needs a CUDA GPU with fp8 (sm_89 or newer)")
@pytest.mark.parametrize("recipe", ["fp8-tensor", "fp8-channel"])
def test_an_fp8_checkpoint_runs_on_scaled_mm_on_cuda(tmp_path, recipe):
    quantized, reference = write_quantized_pair(tmp_path, "llama", recipe)
    hf_config = load_hf_config(quantized)
    cuda = torch.device("cuda")
    model = load_model(quantized, hf_config, TorchAttentionBackend(), torch.bfloat16, cuda)
    assert type(model.model.layers[0].mlp.down_proj) is Fp8Linear
    token_ids = prompt()
    got = llmd_logits_on(model, hf_config, token_ids)
    expected = hf_reference_logits(reference, token_ids)
    assert (got.cpu() - expected).abs().max().item() < 0.5  # bf16 and fp8 activations


def llmd_logits_on(model, hf_config, token_ids):
    with torch.device("cuda"):
        return llmd_logits(model, hf_config, token_ids, torch.bfloat16)
