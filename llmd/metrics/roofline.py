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
