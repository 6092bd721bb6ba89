"""KV-cache block bookkeeping: allocation, ref counts and prefix caching (no torch).

Requests hold lists of integer block ids; full blocks are keyed by a chained hash of
their tokens so identical prefixes share KV memory, and a freed cached block stays
reusable until the LRU free queue hands it to someone else.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from llmd.engine.free_block_queue import FreeBlockQueue, KVBlock
from llmd.engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventLog
from llmd.engine.request import Request
from llmd.errors import KVCacheIntegrityError, require

_ROOT_HASH = b"llmd-prefix-root"


def hash_block(parent_hash: bytes | None, token_ids: Sequence[int]) -> bytes:
    """Chained 128-bit hash of one full block given the hash of the block before it."""
    digest = hashlib.blake2b(parent_hash or _ROOT_HASH, digest_size=16)
    digest.update(array("q", token_ids).tobytes())
    return digest.digest()


@dataclass(frozen=True)
class BlockUsage:
    """A snapshot of the pool: `num_used + num_cached + num_free == num_total` always."""

    num_total: int
    num_used: int
    """Blocks referenced by at least one live request."""
    num_cached: int
    """Unreferenced blocks that still hold a reusable prefix (evicted last-in, last-out)."""
    num_free: int
    """Unreferenced blocks holding nothing reusable."""
    num_prefix_query_tokens: int
    """Prompt tokens looked up in the prefix cache since start."""
    num_prefix_hit_tokens: int
    """Of those, tokens served from cached blocks."""

    def __post_init__(self) -> None:
        counted = self.num_used + self.num_cached + self.num_free
        if counted != self.num_total or min(self.num_used, self.num_cached, self.num_free) < 0:
            raise RuntimeError(
                f"KV pool accounting broken: used {self.num_used} + cached {self.num_cached}"
                f" + free {self.num_free} != total {self.num_total}"
            )


class BlockManager:
    """Hands out KV blocks to requests and shares full blocks of identical prefixes."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size)):
            is_int = isinstance(value, int) and not isinstance(value, bool)
            require(is_int and value > 0, name, f"must be a positive integer, got {value!r}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.kv_events: KVEventLog | None = None
        """Where cache stores and evictions are recorded when a router wants them (off: None)."""
        self.rebuild()
        self.num_prefix_query_tokens = 0
        self.num_prefix_hit_tokens = 0

    def rebuild(self) -> None:
        """Make every block free and forget every cached prefix.

        Only valid while no request holds blocks: it is how the engine starts, and how it
        recovers from an integrity violation found at an idle point.
        """
        if self.kv_events is not None:
            self.kv_events.record(AllBlocksCleared())
        self.blocks = [KVBlock(i) for i in range(self.num_blocks)]
        self.free_queue = FreeBlockQueue(self.blocks)
        self.cached_blocks: dict[bytes, KVBlock] = {}
        self.num_cached_free = 0
        self.num_used_blocks = 0
        """Blocks with a nonzero ref count, counted at each 0 <-> 1 transition."""

    def reset_counters(self) -> None:
        """Zero the prefix-cache lookup counters (after a warm-up, say)."""
        self.num_prefix_query_tokens = 0
        self.num_prefix_hit_tokens = 0

    # ----------------------------------------------------------------- queries

    def usage(self) -> BlockUsage:
        """Counters for metrics and the dashboard (raises if they disagree with the pool).

        Used comes from its own counter and cached/free from the free queue, so the sum
        check in BlockUsage compares two independent accounts of the same pool.
        """
        return BlockUsage(
            num_total=self.num_blocks,
            num_used=self.num_used_blocks,
            num_cached=self.num_cached_free,
            num_free=len(self.free_queue) - self.num_cached_free,
            num_prefix_query_tokens=self.num_prefix_query_tokens,
            num_prefix_hit_tokens=self.num_prefix_hit_tokens,
        )

    @property
    def num_free_blocks(self) -> int:
        """Blocks that an allocation may take (plain free plus evictable cached)."""
        return len(self.free_queue)

    def num_blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold `num_tokens` tokens."""
        return -(-num_tokens // self.block_size)

    # ---------------------------------------------------------- prefix caching

    def get_computed_blocks(self, request: Request) -> tuple[list[KVBlock], int]:
        """Longest cached prefix of a request with no computed tokens: (blocks, num_tokens).

        At least one token is always left to compute, because the step that computes the
        last prompt token is the one that produces the first output's logits. A request
        that asks for prompt logprobs gets no hit: every prompt position must be computed.
        """
        if not self.enable_prefix_caching or request.num_computed_tokens != 0:
            return [], 0
        if request.sampling_params.prompt_logprobs is not None:
            return [], 0
        self._update_block_hashes(request)
        max_hit_blocks = (request.num_tokens - 1) // self.block_size
        hits: list[KVBlock] = []
        for index in range(min(max_hit_blocks, len(request.block_hashes))):
            block = self.cached_blocks.get(request.block_hashes[index])
            start = index * self.block_size
            expected = request.all_token_ids[start : start + self.block_size]
            if block is None or block.token_ids != tuple(expected):
                break
            hits.append(block)
        return hits, len(hits) * self.block_size

    def record_prefix_lookup(self, request: Request, num_hit_tokens: int) -> None:
        """Count an admitted request's prompt tokens and prefix hits for the hit rate.

        A preempted request's re-admission is not a new lookup: counting it again would
        inflate the hit rate with the request's own recomputed blocks.
        """
        if self.enable_prefix_caching and request.num_preemptions == 0:
            self.num_prefix_query_tokens += request.num_prompt_tokens
            self.num_prefix_hit_tokens += min(num_hit_tokens, request.num_prompt_tokens)

    def cache_full_blocks(self, request: Request) -> None:
        """Register the request's newly computed full blocks so others can reuse them."""
        if not self.enable_prefix_caching:
            return
        num_full = min(request.num_computed_tokens // self.block_size, len(request.block_ids))
        self._update_block_hashes(request, num_full)
        stored: list[int] = []
        for index in range(num_full):
            block = self.blocks[request.block_ids[index]]
            if block.block_hash is not None:
                continue  # already registered (a hit, or cached at an earlier step)
            block_hash = request.block_hashes[index]
            if block_hash in self.cached_blocks:
                continue  # an identical block computed concurrently keeps the entry
            start = index * self.block_size
            block.block_hash = block_hash
            block.token_ids = tuple(request.all_token_ids[start : start + self.block_size])
            self.cached_blocks[block_hash] = block
            stored.append(index)
        if self.kv_events is not None and stored:
            self._record_stored(request, stored)

    def _record_stored(self, request: Request, indexes: list[int]) -> None:
        """One BlockStored per run of consecutive newly cached blocks of `request`."""
        runs: list[list[int]] = []
        for index in indexes:
            if runs and runs[-1][-1] == index - 1:
                runs[-1].append(index)
            else:
                runs.append([index])
        assert self.kv_events is not None
        for run in runs:
            first, end = run[0], run[-1] + 1
            self.kv_events.record(
                BlockStored(
                    block_hashes=request.block_hashes[first:end],
                    parent_block_hash=request.block_hashes[first - 1] if first > 0 else None,
                    token_ids=list(
                        request.all_token_ids[first * self.block_size : end * self.block_size]
                    ),
                    block_size=self.block_size,
                )
            )

    def _update_block_hashes(self, request: Request, limit: int | None = None) -> None:
        """Extend request.block_hashes over its full blocks (each hashed once)."""
        num_full = request.num_tokens // self.block_size
        if limit is not None:
            num_full = min(num_full, limit)
        hashes = request.block_hashes
        tokens = request.all_token_ids
        size = self.block_size
        while len(hashes) < num_full:
            index = len(hashes)
            parent = hashes[-1] if hashes else None
            hashes.append(hash_block(parent, tokens[index * size : (index + 1) * size]))

    def reset_prefix_cache(self) -> int:
        """Forget every unreferenced cached prefix; returns how many were dropped."""
        num_dropped = 0
        events, self.kv_events = self.kv_events, None  # one AllBlocksCleared, not N removals
        for block in list(self.free_queue):
            if block.block_hash is not None:
                self._evict(block)
                num_dropped += 1
        self.kv_events = events
        if events is not None and num_dropped:
            events.record(AllBlocksCleared())
        return num_dropped

    # --------------------------------------------------------------- allocation

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        computed_blocks: Sequence[KVBlock] = (),
        num_reserved_blocks: int = 0,
    ) -> bool:
        """Grow the request's block table to hold `num_new_tokens` more tokens.

        `computed_blocks` (prefix hits for a request being admitted) are appended first.
        Returns False, changing nothing, when the pool cannot supply the blocks while
        keeping `num_reserved_blocks` free (a headroom for running requests).
        """
        num_tokens_after = (
            request.num_computed_tokens + len(computed_blocks) * self.block_size + num_new_tokens
        )
        num_required = self.num_blocks_for(num_tokens_after)
        num_new_blocks = max(0, num_required - len(request.block_ids) - len(computed_blocks))
        num_hits_in_free_queue = sum(1 for block in computed_blocks if block.ref_count == 0)
        num_available = len(self.free_queue) - num_hits_in_free_queue - num_reserved_blocks
        if num_new_blocks > num_available:
            return False
        for block in computed_blocks:
            self._touch(block)
            request.block_ids.append(block.block_id)
        for _ in range(num_new_blocks):
            block = self.free_queue.popleft()
            if block.block_hash is not None:
                self._evict(block)
            block.ref_count = 1
            self.num_used_blocks += 1
            request.block_ids.append(block.block_id)
        return True

    def free(self, request: Request) -> None:
        """Release the request's blocks; cached ones stay reusable until evicted.

        Blocks go back in reverse order so a sequence's tail blocks, the least likely to be
        shared, are evicted before its head.
        """
        for block_id in reversed(request.block_ids):
            self._release(self.blocks[block_id])
        request.block_ids = []

    def free_tail(self, request: Request, num_tokens: int) -> int:
        """Release the request's blocks past those `num_tokens` tokens fill; return how many.

        A verify step allocates blocks for every draft, and blocks that only rejected drafts
        reached hold nothing the request will read: they return to the pool at once (the
        next plan allocates again if the request drafts again)."""
        num_kept = self.num_blocks_for(num_tokens)
        tail = request.block_ids[num_kept:]
        for block_id in reversed(tail):
            self._release(self.blocks[block_id])
        del request.block_ids[num_kept:]
        return len(tail)

    def _release(self, block: KVBlock) -> None:
        """Drop one reference; an unreferenced block joins the free queue (cached or not)."""
        block.ref_count -= 1
        if block.ref_count < 0:
            raise KVCacheIntegrityError(f"{block} freed more often than allocated")
        if block.ref_count == 0:
            self.num_used_blocks -= 1
            self.free_queue.append(block)
            if block.block_hash is not None:
                self.num_cached_free += 1

    def _touch(self, block: KVBlock) -> None:
        if block.ref_count == 0:
            self.num_used_blocks += 1
            self.free_queue.remove(block)
            if block.block_hash is not None:
                self.num_cached_free -= 1
        block.ref_count += 1

    def _evict(self, block: KVBlock) -> None:
        """Drop an unreferenced cached block's prefix entry (it becomes a plain free block)."""
        self.num_cached_free -= 1
        if block.block_hash is not None and self.cached_blocks.get(block.block_hash) is block:
            del self.cached_blocks[block.block_hash]
            if self.kv_events is not None:
                self.kv_events.record(BlockRemoved([block.block_hash]))
        block.block_hash = None
        block.token_ids = ()

    # ----------------------------------------------------------------- checks

    def check_integrity(self, live_requests: Sequence[Request] = ()) -> None:
        """Raise KVCacheIntegrityError if ref counts, the free queue or the prefix map disagree.

        Given every live request, each block's ref count must equal the number of block
        tables that hold it; run at idle points, where it costs nothing that matters.
        """
        expected = [0] * self.num_blocks
        for request in live_requests:
            for block_id in request.block_ids:
                expected[block_id] += 1
        num_cached_free = 0
        for block in self.blocks:
            if block.ref_count != expected[block.block_id]:
                raise KVCacheIntegrityError(
                    f"{block}: ref count {block.ref_count}, held by {expected[block.block_id]}"
                )
            in_queue = block in self.free_queue
            if in_queue != (block.ref_count == 0):
                raise KVCacheIntegrityError(
                    f"{block}: free-queue membership disagrees with ref count"
                )
            if in_queue and block.block_hash is not None:
                num_cached_free += 1
        if num_cached_free != self.num_cached_free:
            raise KVCacheIntegrityError(
                f"cached-free counter {self.num_cached_free} != actual {num_cached_free}"
            )
        num_used = sum(1 for block in self.blocks if block.ref_count > 0)
        if num_used != self.num_used_blocks:
            raise RuntimeError(f"used-block counter {self.num_used_blocks} != actual {num_used}")
        if sum(1 for _ in self.free_queue) != len(self.free_queue):
            raise KVCacheIntegrityError("free queue length counter is wrong")
        for block_hash, block in self.cached_blocks.items():
            if block.block_hash != block_hash:
                raise KVCacheIntegrityError(f"prefix map entry points at {block} with another hash")
