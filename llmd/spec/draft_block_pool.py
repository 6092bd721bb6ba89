"""The draft model's own KV blocks: how many, a free list and each request's blocks.

The draft keeps no prefix cache and shares no block, so its bookkeeping is a stack of free
block ids; a request's blocks only grow while it drafts (a rejected draft's slots are
written over later) and all return at once when it finishes or is preempted.
"""

from __future__ import annotations

from llmd.errors import InvalidParameterError

GIB = 1024**3


class DraftBlockPool:
    """Hands out the draft cache's block ids and takes them back."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free_block_ids = list(range(num_blocks - 1, -1, -1))  # pop() takes the lowest

    @property
    def num_free_blocks(self) -> int:
        """Blocks no request holds."""
        return len(self.free_block_ids)

    def grow(self, block_ids: list[int], num_tokens: int) -> bool:
        """Append blocks to `block_ids` until they hold `num_tokens` tokens; False (and
        nothing taken) when the pool has too few."""
        num_missing = -(-num_tokens // self.block_size) - len(block_ids)
        if num_missing <= 0:
            return True
        if num_missing > len(self.free_block_ids):
            return False
        for _ in range(num_missing):
            block_ids.append(self.free_block_ids.pop())
        return True

    def free(self, block_ids: list[int]) -> None:
        """Return a request's blocks to the pool."""
        self.free_block_ids.extend(reversed(block_ids))
        block_ids.clear()


DRAFT_FREE_FRACTION = 0.9
"""Of the device memory free when the draft loads (on CUDA, after the target took its
share), what its weights and KV cache may use: the rest is for its activations."""


def draft_pool_size(
    num_target_blocks: int,
    max_num_seqs: int,
    num_speculative_tokens: int,
    block_size: int,
    bytes_per_block: int,
    free_bytes: float | None = None,
    weight_bytes: int = 0,
) -> int:
    """Blocks for the draft's cache: the target's count plus room for every running
    request's guesses, so it runs short only where the target shares prefix blocks.

    With `free_bytes` (a CUDA device: the target sized its cache from the memory free
    before the draft existed) the pool is cut to what the draft may still use there, and
    refused naming gpu_memory_utilization when not even every request's guesses fit.
    """
    blocks_per_guess_run = -(-num_speculative_tokens // block_size) + 1
    num_guess_blocks = max_num_seqs * blocks_per_guess_run
    num_blocks = num_target_blocks + num_guess_blocks
    if free_bytes is None:
        return num_blocks
    num_fitting = int((free_bytes * DRAFT_FREE_FRACTION - weight_bytes) // bytes_per_block)
    if num_fitting < num_guess_blocks:
        raise InvalidParameterError(
            f"the draft model's weights and KV cache do not fit the {free_bytes / GIB:.2f} GiB "
            f"the target left free; lower it to leave room for them",
            "gpu_memory_utilization",
        )
    return min(num_blocks, num_fitting)
