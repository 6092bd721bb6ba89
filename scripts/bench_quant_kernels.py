#!/usr/bin/env python3
"""Weight-only GEMM throughput on the CPU: llmd's C++ int8/int4 kernels, torch's aten kernels
and the bf16 dense GEMM, in GB/s of weight bytes, on SmolLM2-135M's linear shapes.

    PYTHONPATH=. .venv/bin/python scripts/bench_quant_kernels.py [--rows 1 8] [--repeats 15]

Decode is bound by the weight bytes it reads, so each kernel's figure is its weight (and
scale) bytes over its median time per call. Times are single-thread `time.thread_time()`
(torch.set_num_threads(1)), which other load on the machine barely moves; each sample runs
through enough copies of the weight (> 8x L2) that every call streams it from beyond L2,
as a decode step does layer after layer. All kernels run in the same process, in the same
order each repeat, on bf16 activations (W8A16 per-channel, W4A16 groups of 64).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from llmd.attention.cpu_extension import load_cpu_ops
from llmd.bench.workload import SMOLLM2_135M_SHAPE
from llmd.layers.kernel_config import KernelConfig
from llmd.layers.packed_linear import PackedLinear
from llmd.quantization.grouped_weight import GroupedIntWeight
from llmd.quantization.int4_linear import Int4Linear
from llmd.quantization.int8_linear import Int8Linear

STREAMED_BYTES = 48 << 20
"""Weight bytes one sample cycles through per kernel: well past L2, as a decode step's."""
GROUP_SIZE = 64


def linear_shapes() -> dict[str, tuple[int, int]]:
    """SmolLM2-135M's linears as name -> (out_features, in_features)."""
    shape = SMOLLM2_135M_SHAPE
    hidden, intermediate = shape["hidden_size"], shape["intermediate_size"]
    head_dim = hidden // shape["num_attention_heads"]
    qkv = (shape["num_attention_heads"] + 2 * shape["num_key_value_heads"]) * head_dim
    return {
        "qkv": (qkv, hidden),
        "o": (hidden, hidden),
        "gate_up": (2 * intermediate, hidden),
        "down": (hidden, intermediate),
    }


def random_int_weight(out_features: int, in_features: int, num_bits: int, group_size: int):
    half = 1 << (num_bits - 1)
    values = torch.randint(-half, half, (out_features, in_features), dtype=torch.int8)
    scales = torch.rand(out_features, in_features // group_size) * 0.01 + 0.001
    return GroupedIntWeight(values, scales, None, group_size, num_bits)


Call = Callable[[torch.Tensor], object]


def kernels(out_features: int, in_features: int, num_rows: int) -> dict[str, tuple[list, int]]:
    """name -> (one call per weight copy, weight bytes per call)."""
    ops = load_cpu_ops()
    dense_bytes = out_features * in_features * 2
    num_copies = max(2, STREAMED_BYTES // (dense_bytes // 4))
    cpu_config = KernelConfig(use_cpu_ops=True)
    calls: dict[str, list[Call]] = {name: [] for name in
                                     ("int8 C++", "int8 aten", "int4 C++", "int4 aten",
                                      "bf16 F.linear", "bf16 oneDNN packed")}  # fmt: skip
    byte_counts: dict[str, int] = {}
    for _ in range(num_copies):
        int8 = Int8Linear(random_int_weight(out_features, in_features, 8, in_features), None,
                          torch.bfloat16)  # fmt: skip
        int4 = Int4Linear(random_int_weight(out_features, in_features, 4, GROUP_SIZE), None,
                          torch.bfloat16)  # fmt: skip
        int4.use_kernel_config(cpu_config)
        packed, group, scales_and_zeros = int4.make_aten_operands()
        dense = torch.randn(out_features, in_features, dtype=torch.bfloat16) * 0.02
        prepacked = PackedLinear(dense, None)
        out = torch.empty(num_rows, out_features, dtype=torch.bfloat16)
        calls["int8 C++"].append(
            lambda x, w=int8, out=out: ops.int8_linear(out, x, w.codes, w.scales, None)
        )
        calls["int8 aten"].append(
            lambda x, w=int8: torch.ops.aten._weight_int8pack_mm(x, w.codes, w.aten_scales)
        )
        calls["int4 C++"].append(
            lambda x, w=int4, out=out: ops.int4_linear(
                out, x, w.packed_weight, w.scales, None, GROUP_SIZE, None
            )
        )
        calls["int4 aten"].append(
            lambda x, p=packed, g=group, s=scales_and_zeros: (
                torch.ops.aten._weight_int4pack_mm_for_cpu(x, p, g, s)
            )
        )
        calls["bf16 F.linear"].append(lambda x, w=dense: F.linear(x, w))
        calls["bf16 oneDNN packed"].append(lambda x, layer=prepacked: layer(x))
        byte_counts = {
            "int8 C++": int8.codes.nbytes + int8.scales.nbytes,
            "int8 aten": int8.codes.nbytes + int8.aten_scales.nbytes,
            "int4 C++": int4.packed_weight.nbytes + int4.scales.nbytes,
            "int4 aten": packed.nbytes + scales_and_zeros.nbytes,
            "bf16 F.linear": dense.nbytes,
            "bf16 oneDNN packed": dense.nbytes,
        }
    return {name: (calls[name], byte_counts[name]) for name in calls}


def seconds_per_call(calls: list[Call], hidden: torch.Tensor) -> float:
    """Single-thread CPU time of one pass over every copy, per call."""
    start = time.thread_time()
    for call in calls:
        call(hidden)
    return (time.thread_time() - start) / len(calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"GB/s of weight bytes (median of {args.repeats}), bf16 activations, 1 thread")
    for num_rows in args.rows:
        for shape_name, (out_features, in_features) in linear_shapes().items():
            hidden = torch.randn(num_rows, in_features, dtype=torch.bfloat16)
            by_kernel = kernels(out_features, in_features, num_rows)
            for calls, _ in by_kernel.values():
                seconds_per_call(calls, hidden)  # warm-up: packing caches, page faults
            samples: dict[str, list[float]] = {name: [] for name in by_kernel}
            for _ in range(args.repeats):
                for name, (calls, _) in by_kernel.items():
                    samples[name].append(seconds_per_call(calls, hidden))
            figures = []
            for name, (_, num_bytes) in by_kernel.items():
                seconds = statistics.median(samples[name])
                figures.append(f"{name} {num_bytes / seconds / 1e9:6.1f}")
            print(f"M={num_rows:<2} {shape_name:8} {out_features}x{in_features}: "
                  + " | ".join(figures))  # fmt: skip


if __name__ == "__main__":
    main()
