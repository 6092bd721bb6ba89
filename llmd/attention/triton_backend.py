"""Paged attention on the GPU with llmd's Triton kernels (KV store, decode, prefill).

It follows the metadata contract exactly like the torch backend but never reads tensor
values on the host, so a decode-only step can be captured once per batch-size bucket in a
CUDA graph and replayed with different context lengths, block tables and slots.
An fp8 e4m3 cache (`kv_cache_dtype=fp8`) holds K / k_scale and V / v_scale: the store
quantizes, the attention kernels read it back through the softmax scale and the output.
"""

from __future__ import annotations

import torch

from llmd.attention.backend import AttentionBackend
from llmd.attention.inputs import AttentionInputs
from llmd.errors import InvalidParameterError
from llmd.kernels.decode_attention import decode_attention
from llmd.kernels.kv_store import kv_store
from llmd.kernels.prefill_attention import prefill_attention

FP8_KV_MIN_CAPABILITY = 89
"""Oldest compute capability (10 * major + minor) with Triton's e4m3 type (Ada, Hopper)."""


class TritonAttentionBackend(AttentionBackend):
    """Stores new K/V by slot, then runs the decode kernel on decodes and prefill on chunks.

    CUDA-graph contract for decode-only steps: every launch depends only on tensor shapes
    (num_tokens, heads, head_dim, cache shape, `block_tables.shape[1]`), dtypes and
    `metadata.num_decode_seqs`, never on `seq_lens_cpu` or `max_seq_len`. The split-K choice
    uses the bound `block_tables.shape[1] * block_size` rather than the step's exact longest
    context, so the runner must capture with block tables as wide as any replay will need
    (e.g. max_model_len / block_size) and keep that width fixed per bucket. Padding decode
    sequences may use slot -1 (not stored) and seq_len 0 (output zeros). As for any graph,
    replays must reuse the captured tensors (static buffers refilled in place).
    """

    name = "triton"
    supports_cuda_graphs = True
    reads_fp8_kv = True
    pairs_with_triton_layers = True

    def check_kv_cache_dtype(self, dtype: torch.dtype, device: torch.device) -> None:
        """Refuse fp8 on GPUs before sm_89: Triton has no e4m3 type there (it refuses to
        compile the kernels), so the request fails at start-up rather than at first launch."""
        if dtype != torch.float8_e4m3fn or device.type != "cuda":
            return
        major, minor = torch.cuda.get_device_capability(device)
        if 10 * major + minor < FP8_KV_MIN_CAPABILITY:
            raise InvalidParameterError(
                f"fp8 needs compute capability 8.9 or later with the triton backend "
                f"(this GPU is {major}.{minor}); use kv_cache_dtype=auto",
                "kv_cache_dtype",
            )

    def forward(self, inputs: AttentionInputs) -> torch.Tensor:
        """Write key/value into their slots, then attend each query over its context.

        Rows past the last sequence's tokens (batch padding) are left uninitialised.
        """
        query, metadata = inputs.query, inputs.metadata
        k_cache, v_cache = inputs.k_cache, inputs.v_cache
        # Other caches hold K/V themselves: the kernels ignore the scales for them.
        scales = {"k_scale": inputs.k_scale, "v_scale": inputs.v_scale}
        kv_store(inputs.key, inputs.value, k_cache, v_cache, metadata.slot_mapping, **scales)
        out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
        num_decodes = metadata.num_decode_seqs
        if num_decodes > 0:
            decode_attention(
                query[:num_decodes],
                k_cache,
                v_cache,
                metadata.block_tables[:num_decodes],
                metadata.seq_lens[:num_decodes],
                inputs.scale,
                out=out[:num_decodes],
                **scales,
            )
        if metadata.num_prefill_seqs > 0:
            # Prefill chunks keep their absolute rows: query_start_loc[num_decodes] is the
            # first prefill row, so query and out are passed whole, with no copies.
            prefill_attention(
                query,
                k_cache,
                v_cache,
                metadata.block_tables[num_decodes:],
                metadata.seq_lens[num_decodes:],
                metadata.query_start_loc[num_decodes:],
                max(metadata.query_lens_cpu[num_decodes:]),
                inputs.scale,
                out=out,
                **scales,
            )
        return out
