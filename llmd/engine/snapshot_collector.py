"""Copies the scheduler's and block manager's live state into an `EngineSnapshot`.

It runs on the engine's thread between steps and only copies: counters always, the
request table, timelines and block map's raw material only when asked (a few list copies,
never a walk over every block), so a snapshot costs the engine almost nothing however
large the queue or the KV pool.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Iterable

from llmd.engine.engine_snapshot import (
    BlockMapCopy,
    EngineSnapshot,
    GrammarSection,
    KVUsage,
    Prefilling,
    QueueCounts,
    SnapshotScope,
)
from llmd.engine.request import Request
from llmd.engine.request_view import request_row, request_timeline
from llmd.engine.scheduler import Scheduler


def collect_snapshot(
    scheduler: Scheduler,
    scope: SnapshotScope,
    recent: Iterable[Request] = (),
    grammar: GrammarSection | None = None,
) -> EngineSnapshot:
    """The state of `scheduler` (and its block manager) now.

    `recent` are recently finished requests, newest last, that the caller kept: their rows
    and timelines are included as asked; `grammar` is the structured-output figures.
    """
    now = time.monotonic()
    recent = list(recent)
    manager = scheduler.block_manager
    usage = manager.usage()
    tracker = scheduler.wait_tracker
    requests = recent_rows = None
    if scope.include_requests:
        # The oldest `max_requests` in O(n log k): the queue can hold thousands.
        oldest = heapq.nsmallest(
            scope.max_requests, scheduler.requests.values(), key=lambda r: r.times.arrival
        )
        requests = tuple(request_row(r, now, tracker) for r in oldest)
        newest_last = recent[-scope.max_requests :]
        recent_rows = tuple(request_row(r, now, tracker) for r in reversed(newest_last))
    timelines = []
    for request_id in scope.timeline_request_ids:
        request = scheduler.requests.get(request_id)
        if request is None:
            request = next((r for r in recent if r.request_id == request_id), None)
        timelines.append(
            (request_id, None if request is None else request_timeline(request, now, tracker))
        )
    block_map = None
    if scope.include_block_map:
        block_map = BlockMapCopy(
            manager.num_blocks,
            tuple([block.block_id for block in manager.cached_blocks.values()]),
            tuple((r.request_id, tuple(r.block_ids)) for r in scheduler.running if r.block_ids),
        )
    backlog = None
    if scope.include_backlog:
        queued = itertools.chain(scheduler.waiting, scheduler.running)
        backlog = sum(max(0, r.num_prompt_tokens - r.num_computed_tokens) for r in queued)
    return EngineSnapshot(
        queue=QueueCounts(
            waiting=len(scheduler.waiting),
            running=len(scheduler.running),
            preempted=scheduler.num_preempted_waiting,
            preemptions_total=scheduler.num_preemptions,
        ),
        kv=KVUsage(
            block_size=manager.block_size,
            num_total=usage.num_total,
            num_used=usage.num_used,
            num_cached=usage.num_cached,
            num_free=usage.num_free,
            prefix_query_tokens=usage.num_prefix_query_tokens,
            prefix_hit_tokens=usage.num_prefix_hit_tokens,
        ),
        prefilling=tuple(
            Prefilling(r.request_id, r.num_computed_tokens, r.num_prompt_tokens)
            for r in scheduler.running
            if r.num_output_tokens == 0 and 0 < r.num_computed_tokens < r.num_prompt_tokens
        ),
        num_requests=len(scheduler.requests),
        requests=requests,
        recent=recent_rows,
        timelines=tuple(timelines),
        block_map=block_map,
        backlog_tokens=backlog,
        grammar=grammar or GrammarSection(),
    )
