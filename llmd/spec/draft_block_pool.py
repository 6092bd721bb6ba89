"""The draft model's own KV blocks: a free list and each request's blocks, in plain Python.

The draft keeps no prefix cache and shares no block, so its bookkeeping is a stack of free
block ids; a request's blocks only grow while it drafts (a rejected draft's slots are
written over later) and all return at once when it finishes or is preempted.
"""

from __future__ import annotations


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
