"""A synthetic worst-case prefill batch used to measure peak activation memory on a GPU.

KV memory is what remains after weights and the largest step's activations, so the
profile must run the biggest batch the scheduler can ever produce.
"""

from __future__ import annotations

import torch

from llmd.engine.request import Request
from llmd.engine.scheduler_output import ScheduledChunk, SchedulerOutput
from llmd.runner.input_batch import InputBatch, build_input_batch
from llmd.sampling_params import SamplingParams


def dummy_prefill_batch(num_tokens: int, block_size: int, device: torch.device) -> InputBatch:
    """One prefill chunk of `num_tokens` zeros over blocks 0..n-1, sampling its last token."""
    request = Request("profile", [0] * num_tokens, SamplingParams(max_tokens=1))
    request.block_ids = list(range(-(-num_tokens // block_size)))
    plan = SchedulerOutput(
        chunks=[ScheduledChunk(request, num_tokens, is_sampling=True)],
        num_prefill_tokens=num_tokens,
    )
    return build_input_batch(plan, block_size, device)
