"""Runs one scheduler plan on the device: pack inputs, forward, sample.

The only place where the scheduler's integer bookkeeping meets tensors; it owns the
model, the paged KV cache and the sampler, and returns plain token ids.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from llmd.attention.backend import create_attention_backend
from llmd.config import EngineConfig
from llmd.engine.scheduler_output import SchedulerOutput
from llmd.models.loader import load_model, model_shape
from llmd.outputs import TokenLogprob
from llmd.runner.device import resolve_device, resolve_dtype
from llmd.runner.input_batch import build_input_batch
from llmd.runner.kv_cache import (
    GIB,
    allocate_kv_cache,
    kv_bytes_per_block,
    num_blocks_for_budget,
)
from llmd.runner.sampler import Sampler, build_sampling_batch


@dataclass
class RunnerOutput:
    """Sampled tokens of one step, keyed by request id, and where the time went."""

    sampled_token_ids: dict[str, int]
    logprobs: dict[str, TokenLogprob] = field(default_factory=dict)
    prepare_s: float = 0.0
    forward_s: float = 0.0
    sample_s: float = 0.0


class ModelRunner:
    """Owns the model, KV cache and sampler on one device."""

    def __init__(self, config: EngineConfig, model_path: Path, hf_config: Any) -> None:
        self.config = config
        self.device = resolve_device(config.device)
        self.dtype = resolve_dtype(config.dtype, self.device)
        torch.manual_seed(config.seed)
        self.shape = model_shape(hf_config)
        self.backend = create_attention_backend(config.attention_backend, self.device)
        self.model = load_model(model_path, hf_config, self.backend, self.dtype, self.device)
        self.block_size = config.block_size
        self.bytes_per_block = kv_bytes_per_block(
            self.shape.num_layers,
            self.shape.num_kv_heads,
            self.shape.head_dim,
            self.block_size,
            self.dtype,
        )
        self.num_blocks = self._decide_num_blocks()
        self.kv_caches = allocate_kv_cache(
            self.shape.num_layers,
            self.num_blocks,
            self.block_size,
            self.shape.num_kv_heads,
            self.shape.head_dim,
            self.dtype,
            self.device,
        )
        self.sampler = Sampler(config.seed)

    # ---------------------------------------------------------------- sizing

    def _decide_num_blocks(self) -> int:
        """Explicit num_blocks, else the CPU budget, else what the GPU has left after profiling."""
        if self.config.num_blocks is not None:
            return self.config.num_blocks
        if self.device.type != "cuda":
            budget_bytes = self.config.kv_cache_memory_gib * GIB
            return num_blocks_for_budget(budget_bytes, self.bytes_per_block)
        return num_blocks_for_budget(self._profile_free_gpu_bytes(), self.bytes_per_block)

    def _profile_free_gpu_bytes(self) -> float:
        """Run a worst-case forward, then give the KV cache what the memory budget leaves."""
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)
        num_tokens = self.config.max_num_batched_tokens
        num_blocks = -(-num_tokens // self.block_size)
        scratch_cache = allocate_kv_cache(
            self.shape.num_layers, num_blocks, self.block_size,
            self.shape.num_kv_heads, self.shape.head_dim, self.dtype, self.device,
        )  # fmt: skip
        from llmd.runner.profile_batch import dummy_prefill_batch

        batch = dummy_prefill_batch(num_tokens, self.block_size, self.device)
        with torch.inference_mode():
            hidden = self.model(batch.input_ids, batch.positions, scratch_cache, batch.metadata)
            self.model.compute_logits(hidden[batch.logits_indices])
        torch.cuda.synchronize(self.device)
        peak_bytes = torch.cuda.max_memory_allocated(self.device)
        del scratch_cache, hidden
        torch.cuda.empty_cache()
        free_bytes, total_bytes = torch.cuda.mem_get_info(self.device)
        used_by_others = total_bytes - free_bytes - torch.cuda.memory_reserved(self.device)
        budget = total_bytes * self.config.gpu_memory_utilization - used_by_others - peak_bytes
        return max(budget, 0.0)

    # ---------------------------------------------------------------- step

    @torch.inference_mode()
    def execute(self, plan: SchedulerOutput) -> RunnerOutput:
        """Compute the plan's tokens and sample one token per sampling chunk."""
        start = time.perf_counter()
        batch = build_input_batch(plan, self.block_size, self.device)
        sampling_requests = [plan.chunks[i].request for i in batch.sampling_request_indices]
        sampling_batch = build_sampling_batch(
            sampling_requests, self.shape.vocab_size, self.device
        )
        prepared = time.perf_counter()
        hidden = self.model(batch.input_ids, batch.positions, self.kv_caches, batch.metadata)
        logits = self.model.compute_logits(hidden[batch.logits_indices])  # [num_sampling, vocab]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # attribute GPU time to the forward, honestly
        forwarded = time.perf_counter()
        result = self.sampler(logits, sampling_batch)
        sampled = time.perf_counter()
        request_ids = [request.request_id for request in sampling_requests]
        logprobs = {
            request_id: entry
            for request_id, entry in zip(request_ids, result.logprobs)
            if entry is not None
        }
        return RunnerOutput(
            sampled_token_ids=dict(zip(request_ids, result.token_ids)),
            logprobs=logprobs,
            prepare_s=prepared - start,
            forward_s=forwarded - prepared,
            sample_s=sampled - forwarded,
        )
