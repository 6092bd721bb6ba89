"""oneDNN-packed linear layers: same results as nn.Linear, all layers packed, clean fallback."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from llmd.config import EngineConfig
from llmd.layers import packed_linear
from llmd.layers.packed_linear import PackedLinear, can_pack, pack_linear_layers
from llmd.llm import LLM
from llmd.llm_engine import LLMEngine
from llmd.sampling_params import SamplingParams

requires_packing = pytest.mark.skipif(
    not can_pack(torch.float32), reason="this torch build cannot pack fp32 weights for oneDNN"
)


class TwoLinears(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(33, 70, bias=True), nn.SiLU())
        self.head = nn.Linear(70, 9, bias=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(self.inner(hidden))


@requires_packing
@pytest.mark.parametrize("num_rows", [0, 1, 5, 64])
def test_packed_model_matches_the_plain_one(num_rows):
    torch.manual_seed(0)
    model = TwoLinears()
    hidden = torch.randn(num_rows, 33)
    expected = model(hidden)
    assert pack_linear_layers(model) == 2
    assert isinstance(model.inner[0], PackedLinear) and isinstance(model.head, PackedLinear)
    assert not any(isinstance(module, nn.Linear) for module in model.modules())
    got = model(hidden)
    assert got.shape == (num_rows, 9)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@requires_packing
def test_packed_layer_takes_batched_and_strided_inputs():
    torch.manual_seed(1)
    linear = nn.Linear(33, 70)
    wide = torch.randn(2, 3, 50)[..., :33]  # not contiguous
    expected = linear(wide)
    model = nn.Sequential(linear)
    pack_linear_layers(model)
    torch.testing.assert_close(model(wide), expected, rtol=1e-5, atol=1e-5)


def test_unpackable_dtype_leaves_the_model_alone():
    model = TwoLinears().to(torch.float16)
    assert pack_linear_layers(model) == 0
    assert isinstance(model.head, nn.Linear)


def test_a_packed_gemm_that_fails_its_self_check_is_not_used(monkeypatch):
    def wrong(hidden, weight, bias):
        return torch.zeros(hidden.shape[0], weight.shape[0])

    monkeypatch.setattr(packed_linear, "_packed_gemm", wrong)
    model = TwoLinears()
    assert not can_pack(torch.float32)
    assert pack_linear_layers(model) == 0
    assert isinstance(model.head, nn.Linear)


@requires_packing
@pytest.mark.parametrize("prepack", [True, False])
def test_engine_packs_on_cpu_unless_told_not_to(tiny_model_dir, prepack):
    config = EngineConfig(
        model=str(tiny_model_dir), device="cpu", num_blocks=32, prepack_weights=prepack
    )
    engine = LLMEngine(config)
    linear_kind = PackedLinear if prepack else nn.Linear
    layers = [m for m in engine.runner.model.modules() if isinstance(m, (nn.Linear, PackedLinear))]
    assert layers and all(isinstance(layer, linear_kind) for layer in layers)
    assert engine.runner.num_packed_linears == (len(layers) if prepack else 0)


@requires_packing
def test_packed_and_plain_engines_generate_the_same_greedy_tokens(tiny_model_dir):
    prompts = [[5, 9, 13, 2, 77], list(range(3, 40))]
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    outputs = []
    for prepack in (True, False):
        llm = LLM(str(tiny_model_dir), device="cpu", num_blocks=32, prepack_weights=prepack)
        outputs.append([output.token_ids for output in llm.generate(prompts, params)])
    assert outputs[0] == outputs[1]


def test_row_buckets_cover_every_row_count_with_bounded_padding():
    buckets = packed_linear.row_buckets()
    assert len(buckets) == 22 and buckets[-2:] == [256, 512]
    for num_rows in range(1, packed_linear.ROW_CHUNK + 1):
        bucket = packed_linear.padded_rows(num_rows)
        assert bucket in buckets and num_rows <= bucket
        assert bucket - num_rows <= (0 if num_rows <= 8 else 7 if num_rows <= 64 else 31)
    with pytest.raises(ValueError):
        packed_linear.padded_rows(packed_linear.ROW_CHUNK + 1)


@requires_packing
@pytest.mark.parametrize("num_rows", [1, 9, 63, 65, 255, 256, 257, 511, 512, 513, 1100])
def test_padded_chunked_and_sharded_gemms_match_the_plain_layer(monkeypatch, num_rows):
    """Rows past a bucket edge, past a chunk, and a weight split into uneven column shards."""
    monkeypatch.setattr(packed_linear, "MAX_SHARD_COLUMNS", 32)
    torch.manual_seed(num_rows)
    linear = nn.Linear(40, 75, bias=True)  # shards of 32, 32 and 11 columns
    hidden = torch.randn(num_rows, 40)
    expected = linear(hidden)
    model = nn.Sequential(linear)
    pack_linear_layers(model)
    assert len(model[0].shards) == 3
    assert model[0].shard_shapes() == {(40, 32, True), (40, 11, True)}
    got = model(hidden)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@requires_packing
def test_warm_up_builds_each_distinct_shard_shape_once(monkeypatch):
    monkeypatch.setattr(packed_linear, "MAX_SHARD_COLUMNS", 64)
    model = nn.Sequential(nn.Linear(16, 64), nn.Linear(16, 64), nn.Linear(64, 16, bias=False))
    model.append(nn.Linear(16, 150, bias=False))  # shards of 64, 64 and 22
    pack_linear_layers(model)
    calls = []
    real = packed_linear._packed_gemm
    monkeypatch.setattr(
        packed_linear, "_packed_gemm", lambda x, w, b: calls.append(x.shape[0]) or real(x, w, b)
    )
    assert packed_linear.warm_up_packed_linears(model) == 4  # (16,64,b) (64,16) (16,64) (16,22)
    assert sorted(calls) == sorted(packed_linear.row_buckets() * 4)
