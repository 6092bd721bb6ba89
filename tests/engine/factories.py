"""Small factories for control-plane tests: requests, block managers and schedulers, no model."""

from __future__ import annotations

import itertools

from llmd.config import SchedulerConfig
from llmd.engine.block_manager import BlockManager
from llmd.engine.request import Request
from llmd.engine.scheduler import Scheduler
from llmd.sampling_params import SamplingParams

EOS = 0
_ids = itertools.count()


def make_request(
    num_prompt_tokens: int = 10,
    max_tokens: int = 4,
    prompt_token_ids: list[int] | None = None,
    priority: int = 0,
    ignore_eos: bool = True,
    request_id: str | None = None,
    arrival_time: float | None = None,
    **params,
) -> Request:
    """A request whose prompt is 1..n (or the given ids) with EOS id 0."""
    if prompt_token_ids is None:
        prompt_token_ids = [1 + (i % 97) for i in range(num_prompt_tokens)]
    return Request(
        request_id or f"req-{next(_ids)}",
        prompt_token_ids,
        SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos, **params),
        eos_token_ids=(EOS,),
        priority=priority,
        arrival_time=arrival_time,
    )


def make_scheduler(
    num_blocks: int = 64,
    block_size: int = 4,
    max_num_seqs: int = 16,
    max_num_batched_tokens: int = 64,
    max_model_len: int = 128,
    enable_prefix_caching: bool = True,
    enable_chunked_prefill: bool = True,
    policy: str = "fcfs",
) -> Scheduler:
    """A scheduler over a fresh block pool."""
    config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        enable_chunked_prefill=enable_chunked_prefill,
        policy=policy,
    )
    return Scheduler(config, BlockManager(num_blocks, block_size, enable_prefix_caching))


def run_step(scheduler: Scheduler, next_token: int = 5):
    """Schedule one step, 'sample' `next_token` for every sampling chunk, apply it."""
    output = scheduler.schedule()
    sampled = {c.request.request_id: next_token for c in output.chunks if c.is_sampling}
    finished = scheduler.update_from_output(output, sampled)
    return output, finished


def assert_idle_and_clean(scheduler: Scheduler) -> None:
    """The leak check: queues empty, every block free, every ref count zero."""
    assert not scheduler.requests
    assert not scheduler.running
    assert len(scheduler.waiting) == 0
    manager = scheduler.block_manager
    usage = manager.usage()
    assert usage.num_used == 0
    assert usage.num_free + usage.num_cached == usage.num_total
    assert all(block.ref_count == 0 for block in manager.blocks)
    manager.check_integrity([])
