"""Published memory-bandwidth and compute peaks of accelerators, looked up by exact name.

Exact matching matters: a substring match gave "NVIDIA L40" the L4's 300 GB/s and the
H100 NVL the SXM figures, and every efficiency percentage in `llmd top` follows the peak.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DevicePeaks:
    """A device's peak memory bandwidth and dense compute for one dtype, and their origin."""

    gb_per_s: float | None
    tflop_per_s: float | None
    source: str
    """"published" (datasheet), "measured" (copy and GEMM loops at start-up) or "unknown"."""


UNKNOWN = DevicePeaks(None, None, "unknown")

_BF16_FP16_FP32 = ("bfloat16", "float16", "float32")


def _entry(gb_per_s: float, tflops_16: float, tflops_32: float) -> tuple[float, dict]:
    return gb_per_s, dict(zip(_BF16_FP16_FP32, (tflops_16, tflops_16, tflops_32), strict=True))


# Dense (no sparsity) datasheet figures: tensor-core TFLOP/s for the 16-bit types, plain
# FP32 for float32. Keys are torch.cuda.get_device_name() without the "NVIDIA " prefix.
_PUBLISHED: dict[str, tuple[float, dict[str, float]]] = {
    "H200": _entry(4800.0, 989.0, 67.0),
    "H200 NVL": _entry(4800.0, 835.0, 60.0),
    "H100 80GB HBM3": _entry(3350.0, 989.0, 67.0),
    "H100 SXM5 80GB": _entry(3350.0, 989.0, 67.0),
    "H100 PCIe": _entry(2000.0, 756.0, 51.0),
    "H100 NVL": _entry(3900.0, 835.0, 60.0),
    "A100-SXM4-80GB": _entry(2039.0, 312.0, 19.5),
    "A100-SXM4-40GB": _entry(1555.0, 312.0, 19.5),
    "A100 80GB PCIe": _entry(1935.0, 312.0, 19.5),
    "A100-PCIE-40GB": _entry(1555.0, 312.0, 19.5),
    "L40S": _entry(864.0, 362.0, 91.6),
    "L40": _entry(864.0, 181.0, 90.5),
    "L4": _entry(300.0, 121.0, 30.3),
    "GeForce RTX 4090": _entry(1008.0, 165.0, 82.6),
}


def normalize_device_name(device_name: str) -> str:
    """The table key of a device name: vendor prefix dropped, whitespace collapsed."""
    words = device_name.split()
    if words and words[0].upper() == "NVIDIA":
        words = words[1:]
    return " ".join(words)


def published_peaks(device_name: str, dtype: str) -> DevicePeaks:
    """Datasheet peaks of a known accelerator for a dtype, or UNKNOWN (CPUs, other GPUs)."""
    entry = _PUBLISHED.get(normalize_device_name(device_name))
    if entry is None:
        return UNKNOWN
    gb_per_s, tflops = entry
    return DevicePeaks(gb_per_s, tflops.get(dtype), "published")


def device_peaks(device_name: str, dtype: str) -> tuple[float | None, float | None]:
    """(peak GB/s, peak TFLOP/s) of a known accelerator; (None, None) otherwise."""
    peaks = published_peaks(device_name, dtype)
    return peaks.gb_per_s, peaks.tflop_per_s
