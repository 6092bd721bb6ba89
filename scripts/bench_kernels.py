#!/usr/bin/env python
"""Bandwidth benchmark of llmd's Triton kernels, as a fraction of the GPU's copy bandwidth.

Each kernel is timed with CUDA events over replays of a CUDA graph of a loop of calls
(warm-up, then the median over several runs), as the engine's decode steps run, with the
eager per-call time beside it and reported as achieved GB/s (bytes it must move / time) next to the
device-to-device copy bandwidth measured in the same run; prefill also reports TFLOP/s.
The headline is decode attention at 4k context (goal: >= 70% of copy bandwidth); the W4A16
GEMM (never yet run on a GPU) is timed beside F.linear on the dense weight of its shape.

    .venv/bin/python scripts/bench_kernels.py --json bench.json
    .venv/bin/python scripts/bench_kernels.py --interpret   # CPU smoke run, tiny sizes
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout


@dataclass
class Case:
    """One benchmark: a closure to time and the work it must do."""

    kernel: str
    shape: str
    run: Callable[[], object]
    num_bytes: int
    num_flops: int = 0


@dataclass
class Result:
    """Timing of one case; bandwidth_pct is relative to this run's copy bandwidth."""

    kernel: str
    shape: str
    time_us: float
    """Device time per call, from CUDA-graph replays on CUDA."""
    bandwidth_gbs: float
    bandwidth_pct: float | None
    tflops: float | None
    eager_us: float | None = None
    """Per call when launched eagerly from Python (CUDA only): what launch cost adds."""


def time_us(
    run: Callable[[], object], device: torch.device, warmup: int, iters: int, runs: int
) -> float:
    """Median over `runs` of the mean time of `iters` back-to-back calls, in microseconds.

    On CUDA the `iters` calls are captured once in a CUDA graph and the replays are timed,
    as the engine runs decode steps: eager timing of a short kernel measures Python's launch
    cost instead (about 100-140 us for decode attention's two Triton launches, which read
    as 23% of copy bandwidth for one 32k-token sequence on an H200). `eager_time_us` keeps
    the eager figure.
    """
    if device.type != "cuda":
        return eager_time_us(run, device, warmup, iters, runs)
    for _ in range(warmup):
        run()  # compiles Triton kernels and warms the allocator outside the capture
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iters):
            run()
    graph.replay()  # first replay uploads the graph
    samples = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / iters)
    del graph
    return statistics.median(samples)


def eager_time_us(
    run: Callable[[], object], device: torch.device, warmup: int, iters: int, runs: int
) -> float:
    """Like `time_us` but calling `run` eagerly: host launch cost included."""
    for _ in range(warmup):
        run()
    samples = []
    for _ in range(runs):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            start.record()
            for _ in range(iters):
                run()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / iters)
        else:
            begin = time.perf_counter()
            for _ in range(iters):
                run()
            samples.append((time.perf_counter() - begin) * 1e6 / iters)
    return statistics.median(samples)


def copy_case(device: torch.device, num_bytes: int) -> Case:
    """A large device-to-device copy: the practical ceiling of memory bandwidth."""
    src = torch.empty(num_bytes // 2, dtype=torch.bfloat16, device=device).normal_()
    dst = torch.empty_like(src)
    return Case("copy_", f"{num_bytes >> 20} MiB", lambda: dst.copy_(src), 2 * num_bytes)


def paged_kv(
    seq_lens: list[int],
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device,
):
    """Random caches with each sequence on shuffled blocks; returns caches, tables, lengths."""
    blocks_per_seq = [-(-seq_len // block_size) for seq_len in seq_lens]
    num_blocks = sum(blocks_per_seq) + 1
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, dtype=dtype, device=device)
    v_cache = torch.randn(shape, dtype=dtype, device=device)
    block_ids = torch.randperm(num_blocks, device=device).to(torch.int32)
    block_tables = torch.zeros(len(seq_lens), max(blocks_per_seq), dtype=torch.int32, device=device)
    next_block = 0
    for seq_idx, num_seq_blocks in enumerate(blocks_per_seq):
        block_tables[seq_idx, :num_seq_blocks] = block_ids[next_block : next_block + num_seq_blocks]
        next_block += num_seq_blocks
    seq_lens_tensor = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    return k_cache, v_cache, block_tables, seq_lens_tensor


def decode_cases(args, device, dtype, sizes) -> list[Case]:
    """Decode attention: bytes are every context token's K and V plus q and out."""
    from llmd.kernels.decode_attention import decode_attention

    num_heads, num_kv_heads, head_dim, block_size = sizes["attention"]
    cases = []
    for batch, context in sizes["decode"]:
        k_cache, v_cache, tables, seq_lens = paged_kv(
            [context] * batch, block_size, num_kv_heads, head_dim, dtype, device
        )
        query = torch.randn(batch, num_heads, head_dim, dtype=dtype, device=device)
        out = torch.empty_like(query)
        element = query.element_size()
        kv_bytes = 2 * batch * context * num_kv_heads * head_dim * element
        num_bytes = kv_bytes + 2 * query.numel() * element + tables.numel() * 4

        def run(q=query, k=k_cache, v=v_cache, t=tables, s=seq_lens, o=out):
            return decode_attention(
                q,
                k,
                v,
                t,
                s,
                head_dim**-0.5,
                out=o,
                num_splits=args.decode_num_splits,
                block_n=args.decode_block_n,
            )

        shape = f"b={batch} ctx={context} h={num_heads}/{num_kv_heads} d={head_dim} bs={block_size}"
        cases.append(Case("decode_attention", shape, run, num_bytes))
    return cases


def prefill_cases(device, dtype, sizes) -> list[Case]:
    """Prefill attention: causal FLOPs over prefix + chunk; bytes read K/V once, q, out."""
    from llmd.kernels.prefill_attention import prefill_attention

    num_heads, num_kv_heads, head_dim, block_size = sizes["attention"]
    cases = []
    for batch, chunk, prefix in sizes["prefill"]:
        k_cache, v_cache, tables, seq_lens = paged_kv(
            [prefix + chunk] * batch, block_size, num_kv_heads, head_dim, dtype, device
        )
        query = torch.randn(batch * chunk, num_heads, head_dim, dtype=dtype, device=device)
        out = torch.empty_like(query)
        starts = torch.arange(0, batch * chunk + 1, chunk, dtype=torch.int32, device=device)
        visible = batch * (chunk * prefix + chunk * (chunk + 1) // 2)  # (query, key) pairs
        num_flops = 4 * visible * num_heads * head_dim
        element = query.element_size()
        kv_bytes = 2 * batch * (prefix + chunk) * num_kv_heads * head_dim * element
        num_bytes = kv_bytes + 2 * query.numel() * element

        def run(q=query, k=k_cache, v=v_cache, t=tables, s=seq_lens, qsl=starts, o=out, n=chunk):
            return prefill_attention(q, k, v, t, s, qsl, n, head_dim**-0.5, out=o)

        shape = f"b={batch} chunk={chunk} prefix={prefix} h={num_heads}/{num_kv_heads} d={head_dim}"
        cases.append(Case("prefill_attention", shape, run, num_bytes, num_flops))
    return cases


def elementwise_cases(device, dtype, sizes) -> list[Case]:
    """KV store, RMSNorm, fused add + RMSNorm, rotary and SiLU-mul at model-like sizes."""
    from llmd.kernels.kv_store import kv_store
    from llmd.kernels.rmsnorm import fused_add_rms_norm, rms_norm
    from llmd.kernels.rotary import rotary_embedding
    from llmd.kernels.silu_mul import silu_mul

    num_tokens, hidden, intermediate = sizes["tokens"], sizes["hidden"], sizes["intermediate"]
    num_heads, num_kv_heads, head_dim, block_size = sizes["attention"]
    element = torch.finfo(dtype).bits // 8
    randn = lambda *shape: torch.randn(*shape, dtype=dtype, device=device)  # noqa: E731
    cases = []

    key, value = (
        randn(num_tokens, num_kv_heads, head_dim),
        randn(num_tokens, num_kv_heads, head_dim),
    )
    cache_shape = (-(-num_tokens // block_size), block_size, num_kv_heads, head_dim)
    k_cache, v_cache = randn(*cache_shape), randn(*cache_shape)
    slots = torch.randperm(num_tokens, device=device)
    cases.append(
        Case(
            "kv_store",
            f"t={num_tokens} h={num_kv_heads} d={head_dim}",
            lambda: kv_store(key, value, k_cache, v_cache, slots),
            4 * key.numel() * element + slots.numel() * 8,
        )
    )

    x, residual, weight = randn(num_tokens, hidden), randn(num_tokens, hidden), randn(hidden)
    cases.append(
        Case(
            "rms_norm",
            f"t={num_tokens} hidden={hidden}",
            lambda: rms_norm(x, weight, 1e-6),
            2 * x.numel() * element,
        )
    )
    cases.append(
        Case(
            "fused_add_rms_norm",
            f"t={num_tokens} hidden={hidden}",
            lambda: fused_add_rms_norm(x, residual, weight, 1e-6),
            4 * x.numel() * element,
        )
    )

    query, key_rot = (
        randn(num_tokens, num_heads, head_dim),
        randn(num_tokens, num_kv_heads, head_dim),
    )
    cos = torch.randn(num_tokens, head_dim // 2, device=device)
    sin = torch.randn(num_tokens, head_dim // 2, device=device)
    positions = torch.arange(num_tokens, device=device)
    rotary_bytes = 2 * (query.numel() + key_rot.numel()) * element + 2 * cos.numel() * 4
    cases.append(
        Case(
            "rotary_embedding",
            f"t={num_tokens} h={num_heads}/{num_kv_heads}",
            lambda: rotary_embedding(positions, query, key_rot, cos, sin),
            rotary_bytes,
        )
    )

    gate_up = randn(num_tokens, 2 * intermediate)
    cases.append(
        Case(
            "silu_mul",
            f"t={num_tokens} inter={intermediate}",
            lambda: silu_mul(gate_up),
            3 * num_tokens * intermediate * element,
        )
    )
    return cases


def w4a16_cases(device, dtype, sizes) -> list[Case]:
    """The W4A16 GEMM (g128 with zero points) beside F.linear on the same shape's dense
    weight: bytes are the packed codes, scales, zeros, rows and output (dense: the weight)."""
    import torch.nn.functional as F

    from llmd.kernels.w4a16_gemm import pack_int4_along_k, w4a16_gemm

    cases = []
    for num_rows, depth, num_cols in sizes["w4a16"]:
        group_size = sizes["w4a16_group"]
        num_groups = -(-depth // group_size)
        codes = torch.randint(0, 16, (num_cols, depth), device=device)
        packed = pack_int4_along_k(codes)
        scales = torch.rand(num_groups, num_cols, device=device) * 0.01
        zeros = torch.randint(0, 16, (num_groups, num_cols), device=device).float()
        x = torch.randn(num_rows, depth, dtype=dtype, device=device)
        dense = torch.randn(num_cols, depth, dtype=dtype, device=device)
        element = x.element_size()
        io_bytes = (x.numel() + num_rows * num_cols) * element
        quantized_bytes = packed.numel() * 4 + 2 * scales.numel() * 4 + io_bytes
        shape = f"m={num_rows} k={depth} n={num_cols} g={group_size}"
        flops = 2 * num_rows * depth * num_cols

        def run(x=x, p=packed, s=scales, z=zeros, g=group_size):
            return w4a16_gemm(x, p, s, z, g)

        cases.append(Case("w4a16_gemm", shape, run, quantized_bytes, flops))
        cases.append(Case("dense_linear", shape, lambda x=x, w=dense: F.linear(x, w),
                          dense.numel() * element + io_bytes, flops))  # fmt: skip
    return cases


GPU_SIZES = {
    "attention": (32, 8, 128, 16),  # query heads, KV heads, head_dim, block_size (Llama-3-8B)
    "decode": [(32, 4096), (64, 4096), (1, 32768), (256, 1024)],  # (batch, context)
    "prefill": [(4, 2048, 0), (4, 512, 3584)],  # (batch, chunk, cached prefix)
    "tokens": 8192,
    "hidden": 4096,
    "intermediate": 14336,
    "w4a16": [(1, 4096, 4096), (16, 4096, 28672), (2048, 4096, 4096)],  # decode, prefill
    "w4a16_group": 128,
}
SMOKE_SIZES = {
    "attention": (4, 2, 64, 16),
    "decode": [(2, 40)],
    "prefill": [(2, 24, 8)],
    "tokens": 8,
    "hidden": 64,
    "intermediate": 64,
    "w4a16": [(1, 64, 96), (33, 64, 96)],
    "w4a16_group": 32,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument(
        "--interpret",
        action="store_true",
        help="CPU smoke run through triton's interpreter (tiny sizes, no figures)",
    )
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20, help="calls per timed run")
    parser.add_argument("--runs", type=int, default=5, help="timed runs; the median is reported")
    parser.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
    parser.add_argument("--decode-num-splits", type=int, help="force decode split-K (1 = off)")
    parser.add_argument("--decode-block-n", type=int, help="force decode tokens per tile")
    args = parser.parse_args()

    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported by the kernels
        device, sizes = torch.device("cpu"), SMOKE_SIZES
        args.warmup, args.iters, args.runs = 1, 1, 1
    elif torch.cuda.is_available():
        device, sizes = torch.device("cuda"), GPU_SIZES
    else:
        sys.exit(
            "bench_kernels: no CUDA device; timings on CPU would be meaningless "
            "(use --interpret for a smoke run of the kernels)"
        )
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)

    copy = copy_case(device, (1 << 30) if device.type == "cuda" else (1 << 20))
    copy_us = time_us(copy.run, device, args.warmup, args.iters, args.runs)
    copy_gbs = copy.num_bytes / copy_us / 1e3
    del copy

    cases = decode_cases(args, device, dtype, sizes) + prefill_cases(device, dtype, sizes)
    cases += elementwise_cases(device, dtype, sizes) + w4a16_cases(device, dtype, sizes)
    results = []
    for case in cases:
        elapsed_us = time_us(case.run, device, args.warmup, args.iters, args.runs)
        launch_us = None
        if device.type == "cuda":
            launch_us = eager_time_us(case.run, device, args.warmup, args.iters, args.runs)
        gbs = case.num_bytes / elapsed_us / 1e3
        results.append(
            Result(
                kernel=case.kernel,
                shape=case.shape,
                time_us=elapsed_us,
                eager_us=launch_us,
                bandwidth_gbs=gbs,
                bandwidth_pct=None if args.interpret else 100 * gbs / copy_gbs,
                tflops=case.num_flops / elapsed_us / 1e6 if case.num_flops else None,
            )
        )

    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    mode = "interpreter smoke run: not performance figures" if args.interpret else device_name
    print(f"{mode}; {args.dtype}; copy bandwidth {copy_gbs:.0f} GB/s")
    print(f"{'kernel':<20} {'shape':<52} {'us':>10} {'GB/s':>8} {'%copy':>6} {'TFLOP/s':>8}")
    for r in results:
        pct = "-" if r.bandwidth_pct is None else f"{r.bandwidth_pct:.0f}"
        tflops = "-" if r.tflops is None else f"{r.tflops:.1f}"
        print(
            f"{r.kernel:<20} {r.shape:<52} {r.time_us:>10.1f} {r.bandwidth_gbs:>8.0f} "
            f"{pct:>6} {tflops:>8}"
        )
    if args.json:
        report = {
            "device": device_name,
            "interpret": args.interpret,
            "dtype": args.dtype,
            "copy_bandwidth_gbs": copy_gbs,
            "results": [asdict(r) for r in results],
        }
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
