"""The engine's side of a stats snapshot, collected between steps, and the block map.

The engine thread asks the engine for an `EngineSnapshot` between steps (copies only, see
`llmd/engine/snapshot_collector.py`); the I/O thread builds the block map from its copy,
so a snapshot costs the engine almost nothing however large the KV pool. The daemon reads
no scheduler or block-manager state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from llmd.engine.engine_snapshot import BlockMapCopy, EngineSnapshot, SnapshotScope
from llmd.engine.request import Request
from llmd.metrics.block_map import CACHED, FREE, SHARED, encode_block_map
from llmd.protocol.engine_sections import BlockMap

if TYPE_CHECKING:
    from llmd.llm_engine import LLMEngine


def collect_engine_state(
    engine: LLMEngine,
    recent: Iterable[Request],
    include_requests: bool,
    include_block_map: bool,
    timeline_request_ids: Sequence[str],
    max_requests: int,
) -> EngineSnapshot:
    """The engine's snapshot now, with what the waiting stats requests asked for.

    `recent` are finished requests, newest last. Runs on the engine thread, between steps.
    """
    scope = SnapshotScope(
        include_requests, max_requests, tuple(timeline_request_ids), include_block_map
    )
    return engine.snapshot(scope, recent)


def block_map(copy: BlockMapCopy) -> BlockMap:
    """Each block's owner (an index into `owners`), or FREE, CACHED or SHARED; encoded.

    Runs on the I/O thread. A block's ref count is the number of live block tables that
    hold it, so shared blocks are those in several tables and cached ones are hashed
    blocks in none.
    """
    codes = [FREE] * copy.num_blocks
    for block_id in copy.cached_block_ids:
        codes[block_id] = CACHED
    owners: list[str] = []
    for request_id, block_ids in copy.block_tables:
        index = len(owners)
        owners.append(request_id)
        for block_id in block_ids:
            code = codes[block_id]
            codes[block_id] = index if code in (FREE, CACHED) else SHARED
    return dataclasses.replace(encode_block_map(codes), owners=tuple(owners))
