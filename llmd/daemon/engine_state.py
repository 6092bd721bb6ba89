"""The engine's side of a stats snapshot, in the wire's sections, and the block map.

The engine thread asks the engine for an `EngineSnapshot` between steps (copies only, see
`llmd/engine/snapshot_collector.py`) and keeps it as frozen rows; the I/O thread turns
the rows into plain dicts and builds the block map, so a snapshot costs the engine almost
nothing however large the KV pool. The daemon reads no scheduler or block-manager state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TypedDict

from llmd.engine.engine_snapshot import BlockMapCopy, SnapshotScope
from llmd.engine.request import Request
from llmd.engine.request_view import RequestRow, RequestTimeline
from llmd.metrics.block_map import CACHED, FREE, SHARED, encode_block_map

if TYPE_CHECKING:
    from llmd.llm_engine import LLMEngine


class EngineState(TypedDict, total=False):
    """The engine thread's part of a stats snapshot; empty when it could not be read.

    A TypedDict, not a dataclass, because its plain sections ("queue", "kv") are spread
    into the snapshot as they are; the rest are frozen rows the I/O thread turns into maps.
    """

    queue: dict[str, object]
    kv: dict[str, object]
    requests: tuple[RequestRow, ...] | None
    num_requests: int
    recent: tuple[RequestRow, ...] | None
    timelines: dict[str, RequestTimeline | None]
    block_map_copy: BlockMapCopy


def collect_engine_state(
    engine: LLMEngine,
    recent: Iterable[Request],
    include_requests: bool,
    include_block_map: bool,
    timeline_request_ids: Sequence[str],
    max_requests: int,
) -> EngineState:
    """State of `engine` now, by snapshot section; `recent` are finished requests, newest last.

    "queue" and "kv" are plain data; "requests" and "recent" are RequestRow tuples and
    "timelines" maps each of `timeline_request_ids` to a RequestTimeline or None (see
    `row_dicts`, `timeline_dict`); "block_map_copy" is a BlockMapCopy (see `block_map`).
    """
    scope = SnapshotScope(
        include_requests, max_requests, tuple(timeline_request_ids), include_block_map
    )
    snapshot = engine.snapshot(scope, recent)
    state: EngineState = {"queue": snapshot.queue.to_dict(), "kv": snapshot.kv.to_dict()}
    if include_requests:
        state["requests"] = snapshot.requests
        state["num_requests"] = snapshot.num_requests
        state["recent"] = snapshot.recent
    if timeline_request_ids:
        state["timelines"] = dict(snapshot.timelines)
    if snapshot.block_map is not None:
        state["block_map_copy"] = snapshot.block_map
    return state


def row_dicts(rows: Sequence[RequestRow] | None) -> list[dict[str, object]] | None:
    """The request table's wire rows (None stays None)."""
    return None if rows is None else [row.to_dict() for row in rows]


def timeline_dict(timeline: RequestTimeline | None) -> dict[str, object] | None:
    """A timeline's wire form (None: the request is unknown)."""
    return None if timeline is None else timeline.to_dict()


def block_map(copy: BlockMapCopy) -> dict[str, object]:
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
    encoded = encode_block_map(codes)
    encoded["owners"] = owners
    encoded["codes"] = {"free": FREE, "cached": CACHED, "shared": SHARED}
    return encoded
