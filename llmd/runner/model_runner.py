"""Runs one scheduler plan on the device: pack inputs, forward, sample.

The only place where the scheduler's integer bookkeeping meets tensors; it owns the
model, the paged KV cache, the sampler and (on CUDA) the decode CUDA graphs, and returns
plain token ids.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import torch

from llmd.attention.factory import create_attention_backend
from llmd.config import EngineConfig
from llmd.engine.scheduler_output import SchedulerOutput
from llmd.layers.kernel_config import KernelConfig, configure_kernels
from llmd.layers.packed_experts import pack_expert_weights
from llmd.layers.packed_linear import pack_linear_layers, warm_up_packed_linears
from llmd.layers.routing_stats import RoutingStats
from llmd.models.loader import ModelShape, load_model
from llmd.quantization.quant_config import quantization_name
from llmd.quantization.weight_bytes import model_weight_bytes
from llmd.runner.cuda_graphs import (
    DecodeGraphRunner,
    estimate_graph_pool_bytes,
    graph_batch_sizes,
    graphs_disabled_reason,
)
from llmd.runner.device import resolve_device, resolve_dtype, set_num_threads
from llmd.runner.host_allocator import retain_freed_memory
from llmd.runner.input_batch import DecodeBuffers
from llmd.runner.kv_cache import (
    GIB,
    allocate_kv_cache,
    kv_bytes_per_block,
    num_blocks_for_budget,
    resolve_kv_cache_dtype,
)
from llmd.runner.memory_profile import MemoryProfile, non_torch_bytes
from llmd.runner.pending_step import PendingStep, RunnerOutput, StepEvents
from llmd.runner.pending_tokens import PendingTokens
from llmd.runner.persistent_batch import PersistentBatch
from llmd.runner.profile_batch import dummy_prefill_batch
from llmd.runner.prompt_logprobs import PromptLogprobs
from llmd.runner.row_argmax import make_row_argmax
from llmd.runner.sampler import Sampler, SampleRow, SamplingBatch, build_sampling_batch
from llmd.runner.sampling_state import SamplingState
from llmd.runner.step_batch import (
    build_step_batch,
    build_step_sampling_batch,
    fill_decode_buffers,
)
from llmd.runner.token_bitmask import allowed_tokens_for
from llmd.sampling_params import MAX_LOGPROBS, SamplingParams

__all__ = ["ModelRunner", "RunnerOutput"]

logger = logging.getLogger(__name__)


def has_kv_scales(model: torch.nn.Module) -> bool:
    """Whether the checkpoint gave every attention layer its fp8 KV scales."""
    flags = [module.has_kv_scales for module in model.modules() if hasattr(module, "has_kv_scales")]
    return bool(flags) and all(flags)


MIB = 1024**2


class ModelRunner:
    """Owns the model, KV cache, sampler and decode CUDA graphs on one device.

    The engine resolves the model's shape, the longest context and the step's token budget
    once and passes them in, so runner and scheduler size everything from the same values.
    """

    def __init__(
        self,
        config: EngineConfig,
        model_path: Path,
        hf_config: Any,
        shape: ModelShape,
        max_model_len: int,
        max_num_batched_tokens: int,
    ) -> None:
        self.config = config
        self.device = resolve_device(config.device)
        self.dtype = resolve_dtype(config.dtype, self.device)
        self.num_threads = set_num_threads(config.num_threads) if self.device.type == "cpu" else 0
        if self.device.type == "cpu":
            retain_freed_memory()  # before the model's first buffers: no faults per step
        torch.manual_seed(config.seed)
        self.shape = shape
        self.max_model_len = max_model_len
        """The engine's resolved longest context: it sizes the block-table rows."""
        self.max_num_batched_tokens = max_num_batched_tokens
        """Most tokens one step computes (the scheduler's budget): sizes profiling, graphs."""
        self.backend = create_attention_backend(config.attention_backend, self.device)
        self.kv_dtype = resolve_kv_cache_dtype(
            config.kv_cache_dtype, self.dtype, self.backend, self.device
        )
        # Free device memory before anything of ours is loaded: the KV budget's base.
        self.free_bytes_at_start = (
            torch.cuda.mem_get_info(self.device)[0] if self.device.type == "cuda" else 0
        )
        self.model = load_model(
            model_path, hf_config, self.backend, self.dtype, self.device, config.quantization
        )
        self.quantization = quantization_name(hf_config, config.quantization)
        """The checkpoint's quantization ("" when dense), e.g. "awq w4a16-g128"."""
        self.weight_bytes = model_weight_bytes(self.model)
        if self.kv_dtype == torch.float8_e4m3fn and not has_kv_scales(self.model):
            logger.warning(
                "fp8 KV cache with k/v scales of 1.0 (the checkpoint gives none): keys and "
                "values beyond +-448 saturate"
            )
        self.routing_stats: RoutingStats | None = getattr(self.model, "routing_stats", None)
        """An MoE model's expert load and per-step touched experts; None for a dense one."""
        self.kernel_config = KernelConfig.for_backend(self.backend, self.device)
        configure_kernels(self.model, self.kernel_config)
        self.num_packed_linears = 0
        if self.device.type == "cpu" and config.prepack_weights:
            self.num_packed_linears = pack_linear_layers(self.model)
            pack_expert_weights(self.model)  # MoE experts: before the warm-up finds them
            warm_up_packed_linears(self.model)  # oneDNN's caches fill now, not while serving
        self.block_size = config.block_size
        self.bytes_per_block = kv_bytes_per_block(
            self.shape.num_layers,
            self.shape.num_kv_heads,
            self.shape.head_dim,
            self.block_size,
            self.kv_dtype,
        )
        self.graph_batch_sizes = self._decide_graph_batch_sizes()
        self.graph_reserve_bytes = 0.0  # set aside for graphs when KV is sized by profiling
        self.num_blocks = self._decide_num_blocks()
        self.kv_caches = allocate_kv_cache(
            self.shape.num_layers,
            self.num_blocks,
            self.block_size,
            self.shape.num_kv_heads,
            self.shape.head_dim,
            self.kv_dtype,
            self.device,
            shapes=self.backend.kv_cache_shapes(
                self.num_blocks, self.block_size, self.shape.num_kv_heads, self.shape.head_dim
            ),
        )
        self.sampler = Sampler(config.seed, make_row_argmax(self.kernel_config.use_cpu_ops))
        self.sampling_state = SamplingState(self.shape.vocab_size, self.device)
        self.max_blocks_per_seq = -(-self.max_model_len // self.block_size)
        self.persistent_batch = PersistentBatch(
            config.max_num_seqs, self.max_blocks_per_seq, self.device
        )
        self._pending_tokens: PendingTokens | None = None  # the last launched step's samples
        self._last_done_event: torch.cuda.Event | None = None
        self.graph_runner: DecodeGraphRunner | None = None
        if self.graph_batch_sizes:
            self.graph_runner = self._capture_graphs()

    # ---------------------------------------------------------------- sizing

    def _decide_graph_batch_sizes(self) -> list[int]:
        """Decode batch sizes to capture; empty (with the reason logged) when graphs are off."""
        reason = graphs_disabled_reason(self.device, self.backend, self.config.enforce_eager)
        if reason is None and not getattr(self.model, "can_capture_cuda_graphs", True):
            reason = f"{type(self.model).__name__} groups tokens by expert on the host"
        if reason is None:
            return graph_batch_sizes(self.config.max_num_seqs, self.max_num_batched_tokens)
        if self.device.type == "cuda":
            log = logger.info if self.config.enforce_eager else logger.warning
            log("CUDA graphs disabled, decode steps run eagerly: %s", reason)
        return []

    def _decide_num_blocks(self) -> int:
        """Explicit num_blocks, else the CPU budget, else what the GPU has left after profiling."""
        if self.config.num_blocks is not None:
            return self.config.num_blocks
        if self.device.type != "cuda":
            budget_bytes = self.config.kv_cache_memory_gib * GIB
            return num_blocks_for_budget(budget_bytes, self.bytes_per_block)
        num_blocks = num_blocks_for_budget(self._profile_free_gpu_bytes(), self.bytes_per_block)
        return min(num_blocks, self._max_useful_blocks())

    def _max_useful_blocks(self) -> int:
        """A cap for budget-sized pools: twice what a full batch of longest requests can hold.

        Beyond that, blocks only lengthen the prefix cache's memory, and a tiny model on a
        large GPU would otherwise get tens of millions of blocks of bookkeeping.
        """
        blocks_per_seq = -(-self.max_model_len // self.block_size)
        return 2 * self.config.max_num_seqs * blocks_per_seq

    def _profile_free_gpu_bytes(self) -> float:
        """Run the worst-case step, then give the KV cache what the memory budget leaves.

        The budget is `gpu_memory_utilization` of the memory that was free when the runner
        started (so other processes on a shared GPU are respected), less the weights, the
        peak memory the allocator reserved for the largest prefill step and for sampling a
        full batch (fragmentation included), memory taken outside the allocator, and a
        reserve for the CUDA graphs' pool (captured later, once the KV cache exists).
        """
        self.memory_profile = self._profile_memory()
        logger.info(self.memory_profile.describe())
        return self.memory_profile.kv_budget

    def _profile_memory(self) -> MemoryProfile:
        """Measure the worst-case step (see `_profile_free_gpu_bytes`)."""
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)
        weights_bytes = torch.cuda.memory_allocated(self.device)
        num_tokens = self.max_num_batched_tokens
        # Prompts no longer than max_model_len (positions), each on its own blocks.
        batch = dummy_prefill_batch(num_tokens, self.block_size, self.device, self.max_model_len)
        num_prompts = -(-num_tokens // self.max_model_len)
        num_scratch_blocks = -(-num_tokens // self.block_size) + num_prompts
        scratch_cache = allocate_kv_cache(
            self.shape.num_layers, num_scratch_blocks, self.block_size,
            self.shape.num_kv_heads, self.shape.head_dim, self.kv_dtype, self.device,
        )  # fmt: skip
        scratch_bytes = num_scratch_blocks * self.bytes_per_block  # KV: part of the budget
        num_rows = min(self.config.max_num_seqs, num_tokens)
        with torch.inference_mode():
            hidden = self.model(batch.input_ids, batch.positions, scratch_cache, batch.metadata)
            torch.cuda.synchronize(self.device)
            forward_peak_bytes = torch.cuda.max_memory_allocated(self.device)
            logits = self.model.compute_logits(hidden[:num_rows])  # [num_rows, vocab]
            # A throwaway sampler: profiling must not advance the engine's random state.
            worst_case = worst_case_sampling_batch(num_rows, self.shape.vocab_size, self.device)
            Sampler(self.config.seed)(logits, worst_case)
        torch.cuda.synchronize(self.device)
        outside = non_torch_bytes(
            self.free_bytes_at_start,
            torch.cuda.mem_get_info(self.device)[0],
            torch.cuda.memory_reserved(self.device),
        )
        profile = MemoryProfile(
            free_at_start=self.free_bytes_at_start,
            utilization=self.config.gpu_memory_utilization,
            weights=weights_bytes,
            peak_reserved=torch.cuda.max_memory_reserved(self.device),
            peak_allocated=forward_peak_bytes,
            scratch=scratch_bytes,
            non_torch=outside,
        )
        del scratch_cache, hidden, logits
        torch.cuda.empty_cache()
        if self.graph_batch_sizes:
            self.graph_reserve_bytes = estimate_graph_pool_bytes(
                profile.activations, num_tokens, self.graph_batch_sizes
            )
            profile = dataclasses.replace(profile, graph_reserve=self.graph_reserve_bytes)
        return profile

    def _capture_graphs(self) -> DecodeGraphRunner:
        """Capture one decode graph per batch size over the allocated KV cache."""
        buffers = DecodeBuffers.allocate(
            max(self.graph_batch_sizes), self.max_blocks_per_seq, self.device
        )
        runner = DecodeGraphRunner(self.model, self.kv_caches, buffers, self.graph_batch_sizes)
        stats = runner.capture()
        logger.info(
            "captured %d CUDA graphs (decode batches of %d to %d) in %.1f s using %.0f MiB",
            stats.num_graphs, min(self.graph_batch_sizes), max(self.graph_batch_sizes),
            stats.seconds, stats.device_bytes / MIB,
        )  # fmt: skip
        if self.graph_reserve_bytes and stats.device_bytes > self.graph_reserve_bytes:
            logger.warning(
                "CUDA graphs use %.0f MiB, more than the %.0f MiB reserved before sizing the "
                "KV cache; lower gpu_memory_utilization if steps run out of memory",
                stats.device_bytes / MIB, self.graph_reserve_bytes / MIB,
            )  # fmt: skip
        return runner

    # ---------------------------------------------------------------- step

    def execute(self, plan: SchedulerOutput) -> RunnerOutput:
        """Compute the plan's tokens and sample one token per sampling chunk (launch + wait)."""
        return self.launch(plan).resolve()

    def free(self, plan: SchedulerOutput) -> None:
        """Free the state of a plan's finished and preempted requests, for a plan not run."""
        self.sampling_state.release(plan.finished_request_ids)
        self.persistent_batch.free(plan)

    @torch.inference_mode()
    def launch(self, plan: SchedulerOutput) -> PendingStep:
        """Queue the plan's forward pass and sampling on the device; returns without waiting.

        Decode-only plans that fit a captured bucket replay its CUDA graph over padded
        static buffers; every other plan runs eagerly on an unpadded batch. Inputs come
        from the persistent batch; a decode whose input token is still pending (async
        scheduling) reads it from the previous launch's samples on the device. After a
        failure the rows are dropped: the engine then sends its running requests anew.
        """
        start = time.perf_counter()
        events = None
        if self.device.type == "cuda":
            events = StepEvents(
                torch.cuda.Event(enable_timing=True),
                torch.cuda.Event(enable_timing=True),
                self._last_done_event,
            )
        try:
            self.sampling_state.release(plan.finished_request_ids)
            graph_size = None
            if self.graph_runner is not None:
                graph_size = self.graph_runner.graph_batch_size_for(plan)
            if graph_size is None:
                batch = build_step_batch(
                    plan, self.block_size, self.persistent_batch, self._pending_tokens
                )
            else:
                batch = fill_decode_buffers(
                    plan, self.block_size, self.persistent_batch, self.graph_runner.buffers,
                    graph_size, self._pending_tokens,
                )  # fmt: skip
            sampling_chunks = [plan.chunks[i] for i in batch.sampling_request_indices]
            draft_chunks = [plan.chunks[i] for i in batch.draft_request_indices]
            sampling_batch = build_step_sampling_batch(
                sampling_chunks, self.persistent_batch, self.sampling_state, draft_chunks
            )
            if plan.grammar_bitmask is not None:
                row_of = {chunk.request_id: i for i, chunk in enumerate(sampling_chunks)}
                first_draft_row_of: dict[str, int] = {}
                for offset, chunk in enumerate(draft_chunks):  # rows after the chunks' own
                    first_draft_row_of.setdefault(chunk.request_id, len(sampling_chunks) + offset)
                sampling_batch.allowed_tokens = allowed_tokens_for(
                    plan.grammar_bitmask, row_of, self.device, first_draft_row_of
                )
            prepared = time.perf_counter()
            if self.routing_stats is not None:
                self.routing_stats.take_step_touched()  # drop what a forward outside launch left
            if events is not None:
                # Recorded after the host's preparation, not before: a device that waited
                # for it was idle, and must count so with sync and async scheduling alike.
                events.started.record()
            if graph_size is None:
                hidden = self.model(
                    batch.input_ids, batch.positions, self.kv_caches, batch.metadata
                )
            else:
                hidden = self.graph_runner.replay(graph_size)  # [graph_size, hidden]
            logits = self.model.compute_logits(hidden[batch.logits_indices])  # [n, vocab]
            sample = self.sampler.sample(logits, sampling_batch)
            prompt_logprobs = None
            if batch.prompt_logprob_spans:
                prompt_logprobs = PromptLogprobs.compute(
                    self.model.compute_logits, hidden, batch.prompt_logprob_spans
                )
            penalties = sampling_batch.penalties
            if penalties is not None and penalties.count_slots is not None:
                self.sampling_state.record_sampled(
                    penalties.count_slots,
                    sample.token_ids[penalties.row_indices],
                    penalties.kept_weights(sample.token_ids),
                )
        except Exception:
            # A half-applied step leaves no trusted row state: rebuild it next step.
            self.persistent_batch.clear()
            self._pending_tokens = None
            raise
        request_ids = [chunk.request_id for chunk in sampling_chunks]
        num_experts_touched: int | torch.Tensor = 0
        if self.routing_stats is not None:
            num_experts_touched = self.routing_stats.take_step_touched()
        self._pending_tokens = PendingTokens(
            sample.token_ids, {request_id: i for i, request_id in enumerate(request_ids)}
        )
        pending = PendingStep.start(
            request_ids, sampling_batch, sample, prepared - start, time.perf_counter() - prepared,
            events, prompt_logprobs, num_experts_touched,
            [chunk.request_id for chunk in draft_chunks],
        )  # fmt: skip
        if events is not None:
            self._last_done_event = events.done
        return pending


def worst_case_sampling_batch(
    num_rows: int, vocab_size: int, device: torch.device
) -> SamplingBatch:
    """Rows using every memory-hungry sampling feature: full sort, penalties, logprobs."""
    params = SamplingParams(
        temperature=1.0, top_p=0.9, min_p=0.05, repetition_penalty=1.1,
        presence_penalty=0.5, frequency_penalty=0.5, logprobs=MAX_LOGPROBS,
    )  # fmt: skip
    row = SampleRow(params, prompt_token_ids=[0], output_token_ids=[0])
    return build_sampling_batch([row] * num_rows, vocab_size, device)
