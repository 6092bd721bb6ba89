"""KV-cache events in vLLM's schema: blocks stored in and removed from the prefix cache.

A router that routes by prefix (llm-d, SMG's event-fed index, vllm-router's kv_aware mode)
needs to know which prompt blocks each worker holds; the block manager records these as
they happen and the daemon publishes them (`--kv-events`, llmd/daemon/kv_event_publisher.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BlockStored:
    """Full blocks that entered the prefix cache, in sequence order."""

    block_hashes: list[bytes]
    parent_block_hash: bytes | None
    """The hash of the block before the first (None at a sequence's start)."""
    token_ids: list[int]
    """The blocks' tokens, concatenated."""
    block_size: int


@dataclass(frozen=True)
class BlockRemoved:
    """Blocks evicted from the prefix cache."""

    block_hashes: list[bytes]


@dataclass(frozen=True)
class AllBlocksCleared:
    """Every cached block dropped at once (a prefix-cache reset)."""


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass
class KVEventLog:
    """Events recorded since the last drain, in order (the engine thread only)."""

    events: list[KVEvent] = field(default_factory=list)

    def record(self, event: KVEvent) -> None:
        """Append one event."""
        self.events.append(event)

    def drain(self) -> list[KVEvent]:
        """The events recorded so far; the log starts empty again."""
        events, self.events = self.events, []
        return events
