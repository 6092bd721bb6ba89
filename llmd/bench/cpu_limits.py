"""CPU figures against the machine's own limits, measured in the same run.

Decode attention is bandwidth-bound, so it is reported as GB/s of K/V read against a
measured copy bandwidth; a steady-state decode step is reported as GFLOP/s against the
machine's GEMM rate (the faster of torch's GEMM and oneDNN's on prepacked weights) at the
model's own M, N and K.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

MIB = 1024**2


def _median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def copy_bandwidth_gbps(num_bytes: int = 256 * MIB, repeats: int = 10) -> float:
    """GB/s of a large tensor copy, counting the bytes read (as attention's K/V are)."""
    source = torch.ones(num_bytes // 4)
    target = torch.empty_like(source)
    return num_bytes / _median_seconds(lambda: target.copy_(source), repeats) / 1e9


def decode_attention_gbps(
    num_seqs: int = 32,
    context_len: int = 512,
    num_heads: int = 9,
    num_kv_heads: int = 3,
    head_dim: int = 64,
    block_size: int = 16,
    dtype: torch.dtype = torch.float32,
    num_layers: int = 8,
    backend_name: str = "cpu",
    repeats: int = 5,
    cache_dtype: torch.dtype | None = None,
) -> dict:
    """GB/s of K/V read by one decode step's attention over `num_layers` separate caches.

    `cache_dtype` (default `dtype`) is the KV cache's element type: bfloat16 under float32
    activations is `kv_cache_dtype=bfloat16`.

    Several layers' caches (together larger than the last-level cache) are visited in
    turn, as in a real forward pass, so the K/V come from memory rather than L3.
    """
    from llmd.attention.factory import create_attention_backend
    from llmd.attention.inputs import AttentionInputs
    from llmd.attention.reference import build_metadata

    backend = create_attention_backend(backend_name, torch.device("cpu"))
    blocks_per_seq = -(-context_len // block_size)
    num_blocks = num_seqs * blocks_per_seq + 1
    generator = torch.Generator().manual_seed(0)
    metadata, _ = build_metadata(
        [1] * num_seqs, [context_len] * num_seqs, block_size, num_blocks, generator=generator
    )
    k_shape, v_shape = backend.kv_cache_shapes(num_blocks, block_size, num_kv_heads, head_dim)
    cache_dtype = cache_dtype or dtype
    caches = [
        (torch.randn(k_shape).to(cache_dtype), torch.randn(v_shape).to(cache_dtype))
        for _ in range(num_layers)
    ]
    query = torch.randn(num_seqs, num_heads, head_dim).to(dtype)  # [seqs, heads, head_dim]
    key = torch.randn(num_seqs, num_kv_heads, head_dim).to(dtype)
    value = torch.randn(num_seqs, num_kv_heads, head_dim).to(dtype)

    def all_layers() -> None:
        for k_cache, v_cache in caches:
            inputs = AttentionInputs(query, key, value, k_cache, v_cache, metadata, head_dim**-0.5)
            backend.forward(inputs)

    seconds = _median_seconds(all_layers, repeats) / num_layers
    kv_bytes = 2 * num_seqs * context_len * num_kv_heads * head_dim * caches[0][0].element_size()
    return {
        "backend": backend.name,
        "ms_per_layer": seconds * 1e3,
        "kv_mib_per_layer": kv_bytes / MIB,
        "gbps": kv_bytes / seconds / 1e9,
    }


def decode_step_vs_gemm(
    model_path: Path,
    engine_options: dict,
    num_seqs: int = 32,
    context_len: int = 512,
    num_steps: int = 8,
) -> dict:
    """Steady-state decode steps (`num_seqs` sequences at ~`context_len` tokens) in GFLOP/s,
    against the best GEMM rate over weights of the same shapes at M = num_seqs.

    FLOPs of a step: 2 * M * (weights of every linear layer and the LM head; of an MoE
    layer's experts, the top-k a token uses) plus attention's 4 * M * context * heads *
    head_dim per layer. The GEMM rate counts the
    linear part only, so the ratio is an upper bound of how close a step gets to GEMM.
    """
    from llmd.config import EngineConfig
    from llmd.llm_engine import LLMEngine
    from llmd.sampling_params import SamplingParams

    engine = LLMEngine(
        EngineConfig(model=str(model_path), skip_tokenizer_init=True, **engine_options)
    )
    generator = torch.Generator().manual_seed(3)
    vocab_size = engine.runner.shape.vocab_size
    params = SamplingParams(temperature=0.0, max_tokens=num_steps + 4, ignore_eos=True)
    for _ in range(num_seqs):
        engine.add_request(
            torch.randint(2, vocab_size, (context_len,), generator=generator).tolist(), params
        )
    step_seconds = []
    while engine.has_unfinished_requests() and len(step_seconds) < num_steps:
        stats = engine.step().stats
        if (
            stats is not None
            and stats.num_prefill_tokens == 0
            and stats.num_decode_seqs == num_seqs
        ):
            step_seconds.append(stats.total_s)
    if not step_seconds:
        raise RuntimeError("no steady decode step: raise the token budget or the KV cache")
    step_s = statistics.median(step_seconds)

    runner = engine.runner
    shapes, dtype, shape = _linear_shapes(runner.model), runner.dtype, runner.shape
    del engine, runner
    gemm = gemm_rates(shapes, num_seqs, dtype)
    linear_flops = gemm["linear_flops"]
    attention_flops = (
        4 * num_seqs * context_len * shape.num_heads * shape.head_dim * shape.num_layers
    )
    return {
        "num_seqs": num_seqs,
        "context_len": context_len,
        "step_ms": step_s * 1e3,
        "decode_gflops": (linear_flops + attention_flops) / step_s / 1e9,
        "gemm_ms": linear_flops / gemm["gemm_gflops"] / 1e6,
        "gemm_gflops": gemm["gemm_gflops"],
        "gemm_kind": gemm["gemm_kind"],
        "torch_gemm_gflops": gemm["torch_gflops"],
        "packed_gemm_gflops": gemm["packed_gflops"],
    }


def _linear_shapes(model: torch.nn.Module) -> list[tuple[int, int]]:
    """[N, K] of every projection and the LM head, packed or not; an MoE layer's experts
    count as top-k experts' projections (what each token multiplies), not all of them."""
    from llmd.layers.packed_linear import PackedLinear
    from llmd.models.sparse_moe_block import SparseMoeBlock

    shapes, expert_modules = [], set()
    for block in model.modules():
        if isinstance(block, SparseMoeBlock):
            experts = block.experts
            expert_modules.update(id(module) for module in experts.modules())
            hidden, width = block.gate.in_features, experts.intermediate_size
            shapes += [(2 * width, hidden), (hidden, width)] * block.top_k
    shapes += [
        (module.out_features, module.in_features)
        for module in model.modules()
        if isinstance(module, (torch.nn.Linear, PackedLinear)) and id(module) not in expert_modules
    ]
    return shapes


def gemm_rates(shapes: list[tuple[int, int]], num_rows: int, dtype: torch.dtype) -> dict:
    """GFLOP/s of one pass over weights of `shapes` at M = `num_rows`, the best of two GEMMs.

    torch's default GEMM (F.linear) and oneDNN's on prepacked weights are both measured;
    the faster is the machine's GEMM rate, so llmd's own packing cannot flatter the ratio.
    """
    from llmd.layers.packed_linear import can_pack

    generator = torch.Generator().manual_seed(4)
    weights = [torch.randn(n, k, generator=generator).to(dtype) for n, k in shapes]
    inputs = {k: torch.randn(num_rows, k, generator=generator).to(dtype) for _, k in shapes}
    linear_flops = 2 * num_rows * sum(n * k for n, k in shapes)

    def torch_gemms() -> None:
        for weight in weights:
            F.linear(inputs[weight.shape[1]], weight)

    rates = {"torch": linear_flops / _median_seconds(torch_gemms, 5) / 1e9, "packed": None}
    if can_pack(dtype):
        packed = [torch.ops.mkldnn._reorder_linear_weight(weight) for weight in weights]
        del weights

        def packed_gemms() -> None:
            for weight in packed:
                torch.ops.mkldnn._linear_pointwise(
                    inputs[weight.shape[1]], weight, None, "none", [], ""
                )

        rates["packed"] = linear_flops / _median_seconds(packed_gemms, 5) / 1e9
    best = max((rate, kind) for kind, rate in rates.items() if rate is not None)
    return {
        "linear_flops": linear_flops,
        "gemm_gflops": best[0],
        "gemm_kind": best[1],
        "torch_gflops": rates["torch"],
        "packed_gflops": rates["packed"],
    }
