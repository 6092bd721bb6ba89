#!/usr/bin/env python3
"""MoE expert linears on the CPU: llmd's C++ grouped linear (one call for every touched
expert) against one oneDNN-packed GEMM per touched expert, in GB/s of the touched experts'
weight bytes, on the Qwen3-MoE-64e benchmark shape (64 experts, top-8, bf16).

    PYTHONPATH=. .venv/bin/python scripts/bench_moe_grouped_linear.py [--tokens 1 8 32 128]
        [--repeats 9] [--num-threads 2] [--dtype bfloat16]

A decode step's experts are bound by the bytes of the experts its tokens touch, and with a
handful of rows per expert each per-expert call's fixed cost matters as much. Each sample
runs one layer's gate/up or down projection of `tokens` tokens routed top-8 at random,
cycling through enough layers' copies of the weights (> 4x the last-level cache) that
every call streams its experts from memory, as a step does layer after layer. Both paths
run in the same process, alternating, on the same routings; medians of `--repeats`.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from llmd.attention.cpu_extension import load_cpu_ops
from llmd.bench.workload import QWEN3_MOE_64E_SHAPE
from llmd.layers.packed_linear import PackedLinear

STREAMED_BYTES = 512 << 20
"""Expert weight bytes the copies hold per projection: far past any last-level cache."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 8, 32, 128, 512])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--num-threads", type=int, default=2)
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    return parser.parse_args()


def offsets_for(num_tokens: int, num_experts: int, top_k: int, generator) -> torch.Tensor:
    """[experts + 1] slot offsets of a random top-k routing of num_tokens tokens."""
    ids = torch.stack(
        [torch.randperm(num_experts, generator=generator)[:top_k] for _ in range(num_tokens)]
    )
    counts = torch.bincount(ids.reshape(-1), minlength=num_experts)
    return torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)])


def time_both(ops, weights, packed, rows, offsets, segments, repeats: int) -> dict[str, float]:
    """Median seconds per call of the grouped op and of the per-expert packed GEMMs, each
    round cycling through every copy of the weights; the first round only warms up."""
    out = rows.new_empty(rows.shape[0], weights[0].shape[1])

    def grouped(copy: int) -> None:
        ops.moe_grouped_linear(out, rows, weights[copy], offsets)

    def per_expert(copy: int) -> None:
        for expert, first, end in segments:
            out[first:end] = packed[copy][expert](rows[first:end])

    times: dict[str, list[float]] = {"grouped": [], "packed": []}
    for repeat in range(repeats + 1):
        for label, call in (("grouped", grouped), ("packed", per_expert)):
            start = time.perf_counter()
            for copy in range(len(weights)):
                call(copy)
            if repeat:  # the first round builds oneDNN's primitives and touches the pages
                times[label].append((time.perf_counter() - start) / len(weights))
    return {label: statistics.median(samples) for label, samples in times.items()}


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.num_threads)
    dtype = getattr(torch, args.dtype)
    ops = load_cpu_ops()
    shape = QWEN3_MOE_64E_SHAPE
    num_experts, top_k = shape["num_experts"], shape["num_experts_per_tok"]
    hidden, width = shape["hidden_size"], shape["moe_intermediate_size"]
    generator = torch.Generator().manual_seed(0)
    print(f"{args.dtype}, {args.num_threads} threads, {num_experts} experts, top-{top_k}")
    print("projection  tokens  touched  grouped GB/s  packed GB/s  grouped/packed")
    for name, (out_features, in_features) in {
        "gate_up": (2 * width, hidden),
        "down": (hidden, width),
    }.items():
        layer_bytes = num_experts * out_features * in_features * dtype.itemsize
        num_copies = max(2, STREAMED_BYTES // layer_bytes)
        weights = [
            (torch.randn(num_experts, out_features, in_features, generator=generator) * 0.02).to(
                dtype
            )
            for _ in range(num_copies)
        ]
        packed = [[PackedLinear(w[e], None) for e in range(num_experts)] for w in weights]
        for num_tokens in args.tokens:
            offsets = offsets_for(num_tokens, num_experts, top_k, generator)
            bounds = offsets.tolist()
            segments = [
                (e, bounds[e], bounds[e + 1])
                for e in range(num_experts)
                if bounds[e + 1] > bounds[e]
            ]
            rows = torch.randn(num_tokens * top_k, in_features, generator=generator).to(dtype)
            seconds = time_both(ops, weights, packed, rows, offsets, segments, args.repeats)
            touched_bytes = len(segments) * out_features * in_features * dtype.itemsize
            rate = {label: touched_bytes / t / 1e9 for label, t in seconds.items()}
            print(
                f"{name:<10}  {num_tokens:>6}  {len(segments):>7}  {rate['grouped']:>12.1f}  "
                f"{rate['packed']:>11.1f}  {rate['grouped'] / rate['packed']:>13.2f}x"
            )


if __name__ == "__main__":
    main()
