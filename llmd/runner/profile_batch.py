"""A synthetic worst-case prefill batch used to measure peak activation memory on a GPU.

KV memory is what remains after weights and the largest step's activations, so the
profile must run the biggest batch the scheduler can ever produce.
"""

from __future__ import annotations

import torch

from llmd.engine.scheduler_output import NewRequestData, ScheduledChunk, SchedulerOutput
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
    plan = SchedulerOutput(num_prefill_tokens=num_tokens)
    next_block = 0
    for first in range(0, num_tokens, max_seq_len):
        request_id = f"profile-{first}"
        prompt = [0] * min(max_seq_len, num_tokens - first)
        num_blocks = -(-len(prompt) // block_size)
        block_ids = list(range(next_block, next_block + num_blocks))
        next_block += num_blocks
        plan.new_requests.append(
            NewRequestData(request_id, prompt, [], SamplingParams(max_tokens=1))
        )
        plan.chunks.append(
            ScheduledChunk(None, len(prompt), True, request_id, 0, prompt, block_ids, num_blocks)
        )
    return build_input_batch(plan, block_size, device)
