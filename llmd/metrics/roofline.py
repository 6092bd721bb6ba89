"""Back-of-envelope hardware estimates: bytes a decode step reads, FLOPs a prefill does.

Decode is memory-bound (every step reads all weights plus the batch's KV cache) and
prefill compute-bound (about 2 FLOPs per parameter per token), so these two numbers tell
`llmd top` how close the engine runs to the device's bandwidth and compute peaks.
"""

from __future__ import annotations

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def decode_step_bytes(weight_bytes: int, kv_context_tokens: int, kv_bytes_per_token: int) -> int:
    """Bytes one decode step reads: every weight once plus the K/V of every context token."""
    return weight_bytes + kv_context_tokens * kv_bytes_per_token


def prefill_flops(num_params: int, num_prefill_tokens: int) -> int:
    """Matmul FLOPs of a prefill: 2 per parameter per token (attention scores neglected)."""
    return 2 * num_params * num_prefill_tokens


# Published dense peaks per accelerator: (memory GB/s, {dtype: TFLOP/s}). Tensor-core
# figures for 16-bit types, plain FP32 for float32; matched by substring of the device name.
_PEAKS: tuple[tuple[str, float, dict[str, float]], ...] = (
    ("H200", 4800.0, {"bfloat16": 989.0, "float16": 989.0, "float32": 67.0}),
    ("H100 PCIe", 2000.0, {"bfloat16": 756.0, "float16": 756.0, "float32": 51.0}),
    ("H100", 3350.0, {"bfloat16": 989.0, "float16": 989.0, "float32": 67.0}),
    ("A100-SXM4-80GB", 2039.0, {"bfloat16": 312.0, "float16": 312.0, "float32": 19.5}),
    ("A100", 1555.0, {"bfloat16": 312.0, "float16": 312.0, "float32": 19.5}),
    ("L40S", 864.0, {"bfloat16": 362.0, "float16": 362.0, "float32": 91.6}),
    ("L4", 300.0, {"bfloat16": 121.0, "float16": 121.0, "float32": 30.3}),
    ("RTX 4090", 1008.0, {"bfloat16": 165.0, "float16": 165.0, "float32": 82.6}),
)


def device_peaks(device_name: str, dtype: str) -> tuple[float | None, float | None]:
    """(peak GB/s, peak TFLOP/s) of a known accelerator for a dtype; (None, None) otherwise.

    CPUs and unknown GPUs have no entry: `llmd top` then says "peak unknown" instead of
    comparing against an invented number.
    """
    for key, gb_per_s, tflops in _PEAKS:
        if key in device_name:
            return gb_per_s, tflops.get(dtype)
    return None, None
