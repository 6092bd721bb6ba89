"""A doubly linked queue of free KV blocks in eviction (LRU) order.

A cached block that a new request hits must leave the middle of the free queue; a linked
list makes that O(1), where a deque or list would make every prefix hit O(num_blocks).
"""

from __future__ import annotations

from collections.abc import Iterator

from llmd.errors import KVCacheIntegrityError


class KVBlock:
    """One KV-cache block's bookkeeping: ref count, prefix hash and free-list links."""

    __slots__ = ("block_hash", "block_id", "next_free", "prev_free", "ref_count", "token_ids")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.block_hash: bytes | None = None
        """Chained hash of this block's tokens and all before it, set once it is full."""
        self.token_ids: tuple[int, ...] = ()
        """The block's tokens, kept with the hash so a hit is verified token by token."""
        self.prev_free: KVBlock | None = None
        self.next_free: KVBlock | None = None

    def __repr__(self) -> str:
        cached = "cached" if self.block_hash is not None else "plain"
        return f"KVBlock({self.block_id}, ref={self.ref_count}, {cached})"


class FreeBlockQueue:
    """Free blocks, head evicted first; removal from anywhere is O(1)."""

    def __init__(self, blocks: list[KVBlock]) -> None:
        self._head = KVBlock(-1)  # sentinels keep every link operation branch-free
        self._tail = KVBlock(-1)
        self._head.next_free = self._tail
        self._tail.prev_free = self._head
        self.num_blocks = 0
        for block in blocks:
            self.append(block)

    def popleft(self) -> KVBlock:
        """Remove and return the least recently freed block."""
        block = self._head.next_free
        if block is self._tail or block is None:
            raise IndexError("no free KV blocks")
        self.remove(block)
        return block

    def remove(self, block: KVBlock) -> None:
        """Unlink `block`, which must be in this queue."""
        prev_block, next_block = block.prev_free, block.next_free
        if prev_block is None or next_block is None:
            raise KVCacheIntegrityError(f"{block} is not in the free queue")
        prev_block.next_free = next_block
        next_block.prev_free = prev_block
        block.prev_free = block.next_free = None
        self.num_blocks -= 1

    def append(self, block: KVBlock) -> None:
        """Add `block` at the tail (evicted last)."""
        if block.prev_free is not None or block.next_free is not None:
            raise KVCacheIntegrityError(f"{block} is already in the free queue")
        last = self._tail.prev_free
        assert last is not None  # sentinel invariant, never user input
        last.next_free = block
        block.prev_free = last
        block.next_free = self._tail
        self._tail.prev_free = block
        self.num_blocks += 1

    def __contains__(self, block: KVBlock) -> bool:
        return block.prev_free is not None

    def __iter__(self) -> Iterator[KVBlock]:
        block = self._head.next_free
        while block is not None and block is not self._tail:
            yield block
            block = block.next_free

    def __len__(self) -> int:
        return self.num_blocks
