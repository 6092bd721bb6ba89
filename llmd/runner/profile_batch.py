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


def dummy_prefill_batch(
    num_tokens: int, block_size: int, device: torch.device, max_seq_len: int | None = None
) -> InputBatch:
    """`num_tokens` zeros as prompts of at most `max_seq_len` tokens, each sampling its last.

    Prompts never exceed `max_seq_len` (the model's positions); they sit on consecutive
    blocks 0..n-1, prompt after prompt.
    """
    max_seq_len = max_seq_len or num_tokens
    chunks = []
    next_block = 0
    for first in range(0, num_tokens, max_seq_len):
        num_prompt_tokens = min(max_seq_len, num_tokens - first)
        num_blocks = -(-num_prompt_tokens // block_size)
        request = Request(f"profile-{first}", [0] * num_prompt_tokens, SamplingParams(max_tokens=1))
        request.block_ids = list(range(next_block, next_block + num_blocks))
        next_block += num_blocks
        chunks.append(ScheduledChunk(request, num_prompt_tokens, is_sampling=True))
    plan = SchedulerOutput(chunks=chunks, num_prefill_tokens=num_tokens)
    return build_input_batch(plan, block_size, device)
