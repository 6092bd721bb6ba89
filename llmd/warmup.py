"""Warm-up: the shapes serving meets, run once through the engine before it reports ready.

What the first real requests would otherwise build lazily — the allocator's arenas and
free lists for every activation size, the OpenMP team of the thread that steps, oneDNN's
and Triton's per-shape kernels, the sampler's buffers — made the first minute after start
2.5x slower than the tenth (issue 20). So the daemon's engine thread first runs a
synthetic workload that covers them: a long prompt in token-budget chunks, a wave of
short prompts prefilled together, and their decodes at every batch size from the wave's
down to one, with prefill chunks mixed in. Afterwards the engine is as it was: no
request, no cached prefix, every block free, counters at zero.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmd.sampling_params import SamplingParams

if TYPE_CHECKING:
    from llmd.engine.step_stats import StepStats
    from llmd.llm_engine import LLMEngine

logger = logging.getLogger(__name__)

MAX_WAVE = 64
"""Most short requests decoded together."""
NUM_DECODE_STEPS = 8
"""Decode steps after the wave's prefills: its batch shrinks from `wave` in even steps."""
SHORT_PROMPT_TOKENS = 16
MAX_STEPS = 2_000
"""A bound on warm-up steps whatever the configuration (a runaway loop would hang start-up)."""


@dataclass(frozen=True)
class WarmupReport:
    """What the warm-up ran and how long it took."""

    num_requests: int
    num_steps: int
    num_prefill_tokens: int
    seconds: float


def warm_up(
    engine: LLMEngine, on_step: Callable[[StepStats], None] | None = None
) -> WarmupReport:
    """Run the warm-up workload to completion on the calling thread (the one that steps).

    `on_step` sees each step's stats (admission learns the prefill rate from them).
    """
    started = time.monotonic()
    for index, (prompt, max_tokens) in enumerate(_workload(engine)):
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)
        engine.add_request(prompt, params, request_id=f"llmd-warmup-{index}")
        num_requests = index + 1
    num_steps = num_prefill_tokens = 0
    while engine.has_unfinished_requests() and num_steps < MAX_STEPS:
        result = engine.step()
        num_steps += 1
        if result.stats is not None:
            num_prefill_tokens += result.stats.num_prefill_tokens
            if on_step is not None:
                on_step(result.stats)
    for index in range(num_requests):  # only if MAX_STEPS cut it short
        engine.abort_request(f"llmd-warmup-{index}")
    engine.reset_after_warmup()
    report = WarmupReport(num_requests, num_steps, num_prefill_tokens, time.monotonic() - started)
    logger.info(
        "warmed up in %.1f s: %d requests, %d steps, %d prefill tokens",
        report.seconds,
        report.num_requests,
        report.num_steps,
        report.num_prefill_tokens,
    )
    return report


def _workload(engine: LLMEngine) -> list[tuple[list[int], int]]:
    """(prompt, max_tokens) of each warm-up request, in the order they are added.

    A long prompt runs in token-budget chunks; then `wave` short ones, whose max_tokens
    are staggered so that all of them decode together once every prefill is done, and
    then finish in NUM_DECODE_STEPS even groups (batch sizes wave, ..., wave / 8).
    """
    facts = engine.facts()  # what the engine tells whoever serves it, not its internals
    vocab_size, max_model_len = facts.vocab_size, facts.max_model_len
    budget, block_size = facts.max_num_batched_tokens, facts.block_size
    num_free_blocks = engine.snapshot().kv.num_free
    long_len = max(1, min(max_model_len - 2, 2 * budget + budget // 2))
    long_blocks = -(-long_len // block_size) + 1
    wave = max(1, min(MAX_WAVE, facts.max_num_seqs - 1))
    while True:
        lengths = [SHORT_PROMPT_TOKENS + i % 7 for i in range(wave)]
        num_prefill_steps = -(-(long_len + sum(lengths)) // budget) + 1
        longest = max(lengths) + num_prefill_steps + NUM_DECODE_STEPS
        fits_context = longest <= max_model_len
        num_blocks = long_blocks + wave * (-(-longest // block_size) + 1)
        if wave == 1 or (fits_context and num_blocks <= num_free_blocks):
            break
        wave //= 2
    workload = [(_prompt(long_len, 0, vocab_size), max(1, min(2, max_model_len - long_len)))]
    for index, length in enumerate(lengths):
        length = max(1, min(length, max_model_len - 2))
        group = 1 + index * NUM_DECODE_STEPS // wave
        max_tokens = max(1, min(num_prefill_steps + group, max_model_len - length))
        workload.append((_prompt(length, 1 + index, vocab_size), max_tokens))
    return workload


def _prompt(num_tokens: int, seed: int, vocab_size: int) -> list[int]:
    """Token ids no user prompt is likely to share a prefix with (a different one per seed)."""
    span = max(1, vocab_size - 1)
    return [1 + (seed * 7919 + k * 104729) % span for k in range(num_tokens)]
