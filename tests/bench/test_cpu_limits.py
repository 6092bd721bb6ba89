"""The CPU limit benchmarks run on tiny sizes and account bytes and FLOPs correctly."""

from __future__ import annotations

import pytest
import torch

from llmd.bench import cpu_limits
from llmd.bench.offline import build_parser


@pytest.mark.parametrize("backend", ["cpu", "torch"])
def test_decode_attention_counts_kv_bytes_read(backend):
    result = cpu_limits.decode_attention_gbps(
        num_seqs=2, context_len=40, num_layers=2, repeats=1, backend_name=backend
    )
    assert result["backend"] == backend
    # 2 seqs x 40 tokens x 3 kv heads x 64 dims x fp32, keys and values.
    assert result["kv_mib_per_layer"] * cpu_limits.MIB == 2 * 2 * 40 * 3 * 64 * 4
    assert result["gbps"] > 0


def test_decode_step_vs_gemm_on_a_tiny_model(tiny_model_dir):
    result = cpu_limits.decode_step_vs_gemm(
        tiny_model_dir, {"device": "cpu", "num_blocks": 64}, num_seqs=4, context_len=20,
        num_steps=2,
    )  # fmt: skip
    assert result["num_seqs"] == 4 and result["step_ms"] > 0 and result["gemm_gflops"] > 0


def test_offline_flags_include_cpu_limits_and_threads():
    args = build_parser().parse_args(["--cpu-limits", "--num-threads", "2", "--repeats", "0"])
    assert args.cpu_limits and args.num_threads == 2 and args.repeats == 0


def test_gemm_rate_is_the_faster_of_torch_and_packed_over_every_layer(tiny_model_dir):
    from torch import nn

    from llmd.config import EngineConfig
    from llmd.llm_engine import LLMEngine

    engine = LLMEngine(EngineConfig(model=str(tiny_model_dir), device="cpu", num_blocks=16))
    plain_shapes = [
        (m.out_features, m.in_features)
        for m in engine.runner.model.modules()
        if isinstance(m, nn.Linear)
    ]
    # Packed or not, every projection and the LM head are counted.
    shapes = cpu_limits._linear_shapes(engine.runner.model)
    config = engine.runner.model.config
    assert len(shapes) == 4 * config.num_hidden_layers + 1 and len(plain_shapes) in (0, len(shapes))
    rates = cpu_limits.gemm_rates(shapes, 4, torch.float32)
    assert rates["linear_flops"] == 2 * 4 * sum(n * k for n, k in shapes)
    candidates = [r for r in (rates["torch_gflops"], rates["packed_gflops"]) if r is not None]
    assert rates["gemm_gflops"] == max(candidates)


def test_an_moe_model_counts_each_tokens_top_k_experts_only(tmp_path):
    """Tiny Qwen3-MoE (3 layers, layer 1 dense; 8 experts of width 32, top-2; hidden 64,
    4 heads and 2 KV heads of 32): per sparse layer the router (8 x 64) and two experts'
    gate/up (64 x 64) and down (64 x 32), never all eight."""
    from llmd.config import EngineConfig
    from llmd.llm_engine import LLMEngine
    from tests.tiny_model import make_tiny_model

    path = make_tiny_model(tmp_path, "qwen3_moe")
    engine = LLMEngine(EngineConfig(model=str(path), device="cpu", num_blocks=16))
    shapes = cpu_limits._linear_shapes(engine.runner.model)
    expert_shapes = [(64, 64), (64, 32)] * 2  # top-2 experts: gate|up [2 x 32, 64], down
    attention = [(4 * 32 + 2 * 2 * 32, 64), (64, 4 * 32)]  # qkv, o (head_dim 32)
    dense_mlp = [(2 * 128, 64), (64, 128)]
    sparse_layer = sorted([*expert_shapes, (8, 64), *attention])
    vocab = engine.runner.shape.vocab_size
    assert sorted(shapes) == sorted(
        [*sparse_layer, *sparse_layer, *attention, *dense_mlp, (vocab, 64)]
    )
