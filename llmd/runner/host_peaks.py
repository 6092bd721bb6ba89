"""Measured memory-bandwidth and GEMM peaks of the host CPU, taken once at daemon start-up.

CPUs have no datasheet entry, so `llmd top` compared against nothing ("peak unknown");
a short copy loop and a square matmul in the running dtype give limits measured on this
machine, which is what the efficiency percentages should be relative to.
"""

from __future__ import annotations

import time

import torch

from llmd.metrics.device_peaks import DevicePeaks

COPY_BYTES = 32 * 1024 * 1024
"""Bytes per copy: larger than the last-level cache of most hosts, so memory is measured."""
GEMM_SIZE = 512
"""Side of the square matmul (2 * n^3 FLOPs), big enough to reach the BLAS's peak rate."""
MAX_REPEATS = 50
"""Best of this many runs (within the time budget): other processes only ever slow a run."""


def _best_seconds(action, budget_s: float) -> float:
    """The fastest of up to MAX_REPEATS timed runs after one warm-up, within a time budget."""
    deadline = time.perf_counter() + budget_s
    action()
    best = float("inf")
    for _ in range(MAX_REPEATS):
        started = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - started)
        if time.perf_counter() > deadline:
            break
    return best


def measure_host_peaks(dtype_name: str, budget_s: float = 0.3) -> DevicePeaks:
    """Copy bandwidth (GB/s, read plus write) and GEMM rate (TFLOP/s) of this CPU."""
    dtype = getattr(torch, dtype_name, torch.float32)
    source = torch.ones(COPY_BYTES // 4, dtype=torch.float32)  # [COPY_BYTES / 4]
    target = torch.empty_like(source)
    copy_s = _best_seconds(lambda: target.copy_(source), budget_s * 0.4)
    left = torch.randn(GEMM_SIZE, GEMM_SIZE).to(dtype)  # [n, n]
    right = torch.randn(GEMM_SIZE, GEMM_SIZE).to(dtype)  # [n, n]
    gemm_s = _best_seconds(lambda: torch.mm(left, right), budget_s * 0.6)
    gb_per_s = 2 * COPY_BYTES / copy_s / 1e9
    tflop_per_s = 2 * GEMM_SIZE**3 / gemm_s / 1e12
    return DevicePeaks(gb_per_s, tflop_per_s, "measured")
