"""Paged attention on the CPU with llmd's C++ op, reading K/V straight from the blocks.

The torch backend gathers each step's K/V through the block tables before attending,
which costs more memory traffic than the attention itself; this backend streams every
block once per kv head, in a cache layout that lets the dot products vectorize.
"""

from __future__ import annotations

import torch

from llmd.attention.backend import AttentionBackend
from llmd.attention.cpu_extension import CPU_OP_DTYPES, load_paged_attention_op
from llmd.attention.inputs import AttentionInputs


class CpuAttentionBackend(AttentionBackend):
    """Stores new K/V and attends decodes and prefill chunks in one C++ call per layer.

    Cache layout (see `kv_cache_shapes`): keys `[num_blocks, num_kv_heads, head_dim,
    block_size]` so q.K runs across a block's tokens, values `[num_blocks, num_kv_heads,
    block_size, head_dim]` so p.V runs across head_dim. Building it may compile the op,
    raising CpuExtensionUnavailableError when that is impossible.
    """

    name = "cpu"
    reads_any_kv_dtype = True
    pairs_with_cpu_layer_ops = True

    def __init__(self) -> None:
        self._op = load_paged_attention_op()

    def kv_cache_shapes(
        self, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Keys transposed within each block and kv head; values token-major."""
        return (
            (num_blocks, num_kv_heads, head_dim, block_size),
            (num_blocks, num_kv_heads, block_size, head_dim),
        )

    def forward(self, inputs: AttentionInputs) -> torch.Tensor:
        """Write key/value into their slots, then attend each query over its context.

        The op computes in float32 whatever the cache dtype (fp32, bf16, or fp8 e4m3 holding
        K / k_scale and V / v_scale), reading fp32 or bf16 queries
        and writing the output in the query's dtype (others go through float32); rows
        past the last sequence's tokens (batch padding) are left uninitialised.
        query/key/value may be views into the fused qkv output (strided tokens): the op
        reads them in place.
        """
        query, metadata = inputs.query, inputs.metadata
        query_dtype, cache_dtype = query.dtype, inputs.k_cache.dtype
        if query_dtype == cache_dtype and query_dtype in CPU_OP_DTYPES:
            # The common case (K/V cached in the model's dtype): nothing to convert.
            op_dtype = kv_dtype = query_dtype
            k_scale = v_scale = 1.0
        else:
            op_dtype = query_dtype if query_dtype in CPU_OP_DTYPES else torch.float32
            # An fp8 cache takes K/V in the op's dtype and quantizes them with the layer's
            # scales; other caches hold K/V themselves (scales 1.0).
            is_fp8 = cache_dtype == torch.float8_e4m3fn
            kv_dtype = op_dtype if is_fp8 else cache_dtype
            k_scale, v_scale = (inputs.k_scale, inputs.v_scale) if is_fp8 else (1.0, 1.0)
        out = torch.empty(query.shape, dtype=op_dtype)  # [num_tokens, heads, head_dim]
        self._op(
            out,
            _token_rows(query, op_dtype),
            _token_rows(inputs.key, kv_dtype),
            _token_rows(inputs.value, kv_dtype),
            inputs.k_cache,
            inputs.v_cache,
            metadata.slot_mapping,
            metadata.block_tables,
            metadata.query_start_loc,
            metadata.seq_lens,
            inputs.scale,
            k_scale,
            v_scale,
        )
        return out if op_dtype == query_dtype else out.to(query_dtype)


def _token_rows(heads: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`heads` [tokens, heads, head_dim] in `dtype` as the op reads it: each token's heads
    contiguous, any stride between tokens (a view into qkv stays a view; anything else is
    converted or copied)."""
    if heads.dtype != dtype:
        heads = heads.to(dtype)
    _, head_stride, dim_stride = heads.stride()
    if dim_stride == 1 and head_stride == heads.shape[2]:
        return heads
    return heads.contiguous()
