#!/usr/bin/env python
"""CPU GEMM rates on a model's own linear shapes: torch's default GEMM against prepacked ones.

For each batch size M, one pass over every projection and the LM head of the checkpoint's
shapes (weights larger than the last-level cache, as in a real forward pass) is timed
with torch's F.linear, with oneDNN's linear on weights packed once (what llmd runs with
`prepack_weights`), and with MKL's packed GEMM (what inductor's weight freezing uses for
fp32), interleaved, median of --repeats. Prints GFLOP/s and each packed GEMM's speed-up.

    .venv/bin/python scripts/bench_cpu_gemm.py --model /path/to/checkpoint --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout


def linear_shapes(model_path: str) -> list[tuple[int, int]]:
    """[N, K] of every projection and the LM head, from the checkpoint's config."""
    from llmd.models.loader import load_hf_config
    from llmd.models.registry import model_class_for

    hf_config = load_hf_config(model_path)
    with torch.device("meta"):
        model = model_class_for(hf_config)(hf_config, None)
    return [
        (module.out_features, module.in_features)
        for module in model.modules()
        if isinstance(module, torch.nn.Linear)
    ]


def variants(weights: list[torch.Tensor], num_rows: int) -> dict:
    """name -> (prepared weights, one GEMM call) for every GEMM this torch build can run."""
    out = {"torch F.linear": (weights, lambda x, w: F.linear(x, w))}
    if torch.backends.mkldnn.is_available():
        packed = [torch.ops.mkldnn._reorder_linear_weight(w) for w in weights]
        out["oneDNN packed"] = (
            packed,
            lambda x, w: torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], ""),
        )
    if hasattr(torch.ops.mkl, "_mkl_linear") and torch.backends.mkl.is_available():
        packed = [(torch.ops.mkl._mkl_reorder_linear_weight(w, num_rows), w) for w in weights]
        out["MKL packed"] = (
            packed,
            lambda x, w: torch.ops.mkl._mkl_linear(x, w[0], w[1], None, num_rows),
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="checkpoint directory (its config)")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 64, 256, 2048])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = linear_shapes(args.model)
    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(n, k, generator=generator) * 0.02 for n, k in shapes]
    flops_per_row = 2 * sum(n * k for n, k in shapes)
    print(f"{len(shapes)} linear layers, {sum(w.numel() for w in weights) * 4 / 1e6:.0f} MB "
          f"fp32, {torch.get_num_threads()} threads; GFLOP/s (speed-up over F.linear)")  # fmt: skip
    for num_rows in args.rows:
        inputs = {k: torch.randn(num_rows, k, generator=generator) for _, k in shapes}
        runs = variants(weights, num_rows)
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.repeats + 1):  # the first round warms up
            for name, (prepared, call) in runs.items():
                start = time.perf_counter()
                for (_, k), weight in zip(shapes, prepared, strict=True):
                    call(inputs[k], weight)
                times[name].append(time.perf_counter() - start)
        medians = {name: statistics.median(t[1:]) for name, t in times.items()}
        base = medians["torch F.linear"]
        cells = [
            f"{name} {flops_per_row * num_rows / s / 1e9:6.1f} ({base / s:4.2f}x)"
            for name, s in medians.items()
        ]
        print(f"M={num_rows:<5d} " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
