"""CUDA graphs of decode-only steps: one graph per batch-size bucket, replayed every step.

A decode step of a small model launches hundreds of tiny kernels whose CPU launch cost
exceeds their GPU time; capturing the forward once per padded batch size and replaying it
turns a step into one launch. Inputs are refilled in place in `DecodeBuffers`, and only
the Triton attention backend qualifies (it never reads tensor values on the host).
"""

from __future__ import annotations

import bisect
import gc
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from llmd.attention.backend import AttentionBackend
from llmd.engine.scheduler_output import SchedulerOutput
from llmd.errors import LLMDError
from llmd.runner.input_batch import DecodeBuffers

GRAPH_BATCH_SIZE_STEP = 8
"""Buckets past 8 sequences grow by this many (1, 2, 4, 8, 16, 24, ...)."""
MAX_GRAPH_BATCH_SIZE = 512
"""Larger decode batches run eagerly: launch overhead no longer dominates them."""
GRAPH_OVERHEAD_BYTES = 4 * 1024**2
"""Reserve per captured graph for its output and the driver's graph objects (estimate)."""
NUM_WARMUP_RUNS = 2
"""Eager runs per bucket before capture: compile Triton kernels, build lazy tables."""


def graph_batch_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> list[int]:
    """Bucket sizes 1, 2, 4, 8, 16, 24, ... ending exactly at the largest decode batch.

    The largest decode batch is bounded by both limits (a decode costs one token of the
    step budget) and by MAX_GRAPH_BATCH_SIZE.
    """
    limit = min(max_num_seqs, max_num_batched_tokens, MAX_GRAPH_BATCH_SIZE)
    candidates = [1, 2, 4, *range(8, limit, GRAPH_BATCH_SIZE_STEP)]
    return [size for size in candidates if size < limit] + [limit]


def bucket_for(num_seqs: int, batch_sizes: Sequence[int]) -> int | None:
    """The smallest bucket holding `num_seqs` sequences, or None if none is large enough."""
    index = bisect.bisect_left(batch_sizes, num_seqs)
    return batch_sizes[index] if index < len(batch_sizes) else None


def graph_batch_size_for(
    plan: SchedulerOutput, batch_sizes: Sequence[int], max_blocks_per_seq: int
) -> int | None:
    """The bucket a plan replays in, or None when it must run eagerly.

    Only decode-only plans qualify (every chunk one token that is sampled), with at most
    the largest bucket's sequences, each with a block table that fits the buffers.
    """
    for chunk in plan.chunks:
        if not chunk.is_decode or chunk.num_blocks > max_blocks_per_seq:
            return None
    if not plan.chunks:
        return None
    return bucket_for(len(plan.chunks), batch_sizes)


def graphs_disabled_reason(
    device: torch.device, backend: AttentionBackend, enforce_eager: bool
) -> str | None:
    """Why decode steps must run eagerly on this engine, or None when graphs can be used."""
    if device.type != "cuda":
        return f"CUDA graphs need a CUDA device (device is {device.type})"
    if enforce_eager:
        return "enforce_eager is set"
    if not backend.supports_cuda_graphs:
        return (
            f"the {backend.name} attention backend reads metadata on the host, which a "
            "CUDA graph cannot replay (use attention_backend=triton)"
        )
    return None


def estimate_graph_pool_bytes(
    activation_bytes: float, num_profiled_tokens: int, batch_sizes: Sequence[int]
) -> float:
    """Memory to set aside for the graphs' private pool before sizing the KV cache.

    Graphs share one pool, captured largest first, so it holds about one largest-bucket
    forward (scaled from a profiled forward of `num_profiled_tokens` tokens) plus a fixed
    overhead per graph. The real use is measured after capture and logged.
    """
    largest_forward = max(activation_bytes, 0.0) * max(batch_sizes) / max(num_profiled_tokens, 1)
    return largest_forward + len(batch_sizes) * GRAPH_OVERHEAD_BYTES


@dataclass(frozen=True)
class CaptureStats:
    """What capturing cost: graphs, seconds and device memory (pool plus driver objects)."""

    num_graphs: int
    seconds: float
    device_bytes: int


class DecodeGraphRunner:
    """Captured decode graphs sharing one memory pool, and the buffers they read."""

    def __init__(
        self,
        model: nn.Module,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        buffers: DecodeBuffers,
        batch_sizes: Sequence[int],
    ) -> None:
        if buffers.seq_lens.device.type != "cuda":
            raise LLMDError("CUDA graphs need buffers on a CUDA device", "device")
        if max(batch_sizes) > buffers.max_num_seqs:
            raise LLMDError("a graph bucket exceeds the decode buffers", "max_num_seqs")
        self.model = model
        self.kv_caches = kv_caches
        self.buffers = buffers
        self.batch_sizes = sorted(batch_sizes)
        self.num_replays = 0
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._outputs: dict[int, torch.Tensor] = {}  # [size, hidden_size] per bucket

    def graph_batch_size_for(self, plan: SchedulerOutput) -> int | None:
        """The bucket `plan` replays in, or None when it must run eagerly."""
        return graph_batch_size_for(plan, self.batch_sizes, self.buffers.max_blocks_per_seq)

    @torch.inference_mode()
    def capture(self) -> CaptureStats:
        """Warm up and capture every bucket, largest first, into one shared memory pool.

        Must run after the KV cache is allocated (graphs bake in its addresses). Capture
        inputs are all padding rows, so warm-up and capture never write the KV cache.
        """
        device = self.buffers.seq_lens.device
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()  # measure the graphs, not blocks cached by earlier steps
        free_before, _ = torch.cuda.mem_get_info(device)
        started = time.perf_counter()
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream(device)
        # Some torch versions gc.collect() at every capture; frozen objects make it cheap.
        gc.collect()
        gc.freeze()
        try:
            for size in sorted(self.batch_sizes, reverse=True):
                batch = self.buffers.padding_batch(size)
                args = (batch.input_ids, batch.positions, self.kv_caches, batch.metadata)
                stream.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(stream):
                    for _ in range(NUM_WARMUP_RUNS):
                        self.model(*args)
                torch.cuda.current_stream(device).wait_stream(stream)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=stream):
                    hidden = self.model(*args)  # [size, hidden_size]
                self._graphs[size] = graph
                self._outputs[size] = hidden
        except (RuntimeError, torch.cuda.OutOfMemoryError) as error:
            raise LLMDError(
                f"CUDA graph capture failed ({type(error).__name__}: {error}); run with "
                "enforce_eager=True or a lower gpu_memory_utilization",
                "enforce_eager",
            ) from error
        finally:
            gc.unfreeze()
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()  # drop the warm-up runs' cached blocks
        free_after, _ = torch.cuda.mem_get_info(device)
        return CaptureStats(
            num_graphs=len(self._graphs),
            seconds=time.perf_counter() - started,
            device_bytes=max(free_before - free_after, 0),
        )

    def replay(self, batch_size: int) -> torch.Tensor:  # [batch_size, hidden_size]
        """Run the graph of `batch_size` over what the buffers hold now; returns its output.

        The output lives in the shared pool: read it before the next replay of any graph.
        """
        graph = self._graphs.get(batch_size)
        if graph is None:
            raise LLMDError(f"no CUDA graph was captured for batch size {batch_size}")
        graph.replay()
        self.num_replays += 1
        return self._outputs[batch_size]
