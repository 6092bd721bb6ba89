"""The engine's side of a stats snapshot: queues, KV use, request table, timelines, block map.

It reads scheduler and block-manager state, which only the engine thread may touch, so it
runs there between steps; it only copies (the block map's raw material is a few list
copies, not a walk over every block), and the I/O thread builds the rest and merges in
the metrics, so a snapshot costs the engine almost nothing however large the KV pool.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from llmd.engine.request import Request
from llmd.engine.wait_tracker import WaitTracker
from llmd.metrics.block_map import CACHED, FREE, SHARED, encode_block_map

MAX_TIMELINE_POINTS = 256
"""Most events and token times in a timeline (the newest are kept)."""


@dataclass(frozen=True)
class BlockMapCopy:
    """What the block map is built from, copied on the engine thread in O(running) time."""

    num_blocks: int
    hashed_blocks: list[Any]
    """Every block that holds a prefix-cache hash (its `block_id` never changes)."""
    block_tables: list[tuple[str, list[int]]]
    """(request id, block ids) of each running request holding blocks."""


def collect_engine_state(
    engine: Any,
    recent: Iterable[Request],
    include_requests: bool,
    include_block_map: bool,
    timeline_request_ids: Sequence[str],
    max_requests: int,
) -> dict[str, Any]:
    """State of `engine` now; `recent` are recently finished requests, newest last.

    Plain data except "block_map_copy" (a BlockMapCopy, for `block_map`) and "timelines"
    (request id -> timeline or None, for each of `timeline_request_ids`).
    """
    now = time.monotonic()
    scheduler = engine.scheduler
    usage = engine.block_manager.usage()
    state: dict[str, Any] = {
        "queue": {
            "waiting": len(scheduler.waiting),
            "running": len(scheduler.running),
            "preempted": scheduler.num_preempted_waiting,
            "preemptions_total": scheduler.num_preemptions,
        },
        "kv": {
            "block_size": engine.block_manager.block_size,
            "num_total": usage.num_total,
            "num_used": usage.num_used,
            "num_cached": usage.num_cached,
            "num_free": usage.num_free,
            "usage": usage.num_used / usage.num_total,
            "prefix_query_tokens": usage.num_prefix_query_tokens,
            "prefix_hit_tokens": usage.num_prefix_hit_tokens,
            "prefix_hit_rate": (
                usage.num_prefix_hit_tokens / usage.num_prefix_query_tokens
                if usage.num_prefix_query_tokens
                else None
            ),
        },
    }
    recent = list(recent)
    tracker = scheduler.wait_tracker
    if include_requests:
        # The oldest `max_requests` in O(n log k): the queue can hold thousands.
        oldest = heapq.nsmallest(
            max_requests, scheduler.requests.values(), key=lambda r: r.times.arrival
        )
        state["requests"] = [request_row(r, now, tracker) for r in oldest]
        state["num_requests"] = len(scheduler.requests)
        state["recent"] = [request_row(r, now, tracker) for r in reversed(recent[-max_requests:])]
    if timeline_request_ids:
        timelines: dict[str, Any] = {}
        for request_id in timeline_request_ids:
            request = scheduler.requests.get(request_id)
            if request is None:
                request = next((r for r in recent if r.request_id == request_id), None)
            timelines[request_id] = (
                None if request is None else request_timeline(request, now, tracker)
            )
        state["timelines"] = timelines
    if include_block_map:
        manager = engine.block_manager
        state["block_map_copy"] = BlockMapCopy(
            manager.num_blocks,
            list(manager.cached_blocks.values()),
            [(r.request_id, list(r.block_ids)) for r in scheduler.running if r.block_ids],
        )
    return state


def request_row(request: Request, now: float, tracker: WaitTracker) -> dict[str, Any]:
    """One row of the request table."""
    times = request.times
    max_tokens = request.sampling_params.max_tokens
    num_prompt = request.num_prompt_tokens
    prefill_progress = min(1.0, request.num_computed_tokens / num_prompt) if num_prompt else 1.0
    return {
        "request_id": request.request_id,
        "label": request.label,
        "state": request.status.value,
        "waiting_on": tracker.current_reason(request),
        "wait_s": tracker.total_wait_s(request, now),
        "finish_reason": None if request.finish_reason is None else request.finish_reason.value,
        "priority": request.priority,
        "num_prompt_tokens": num_prompt,
        "num_generated_tokens": request.num_output_tokens,
        "max_tokens": max_tokens,
        "num_computed_tokens": request.num_computed_tokens,
        "num_cached_tokens": request.num_cached_tokens,
        "num_blocks": len(request.block_ids),
        "num_preemptions": request.num_preemptions,
        "prefill_progress": prefill_progress,
        "decode_progress": request.num_output_tokens / max_tokens,
        "age_s": (times.finished or now) - times.arrival,
        "ttft_s": None if times.first_token is None else times.first_token - times.arrival,
    }


def request_timeline(request: Request, now: float, tracker: WaitTracker) -> dict[str, Any]:
    """A request's lifecycle, in seconds since its arrival, and why it waited."""
    times = request.times
    arrival = times.arrival

    def since(moment: float | None) -> float | None:
        return None if moment is None else moment - arrival

    return {
        "request_id": request.request_id,
        "label": request.label,
        "state": request.status.value,
        "waiting_on": tracker.current_reason(request),
        "waits": tracker.breakdown(request, now).to_dict(),
        "age_s": (times.finished or now) - arrival,
        "first_scheduled_s": since(times.first_scheduled),
        "first_token_s": since(times.first_token),
        "finished_s": since(times.finished),
        "events": [
            [moment - arrival, kind, num_tokens]
            for moment, kind, num_tokens in request.events[-MAX_TIMELINE_POINTS:]
        ],
        "token_times_s": [moment - arrival for moment in times.token_times[-MAX_TIMELINE_POINTS:]],
        "num_tokens_total": len(times.token_times),
    }


def block_map(copy: BlockMapCopy) -> dict[str, Any]:
    """Each block's owner (an index into `owners`), or FREE, CACHED or SHARED; encoded.

    Runs on the I/O thread. A block's ref count is the number of live block tables that
    hold it, so shared blocks are those in several tables and cached ones are hashed
    blocks in none.
    """
    codes = [FREE] * copy.num_blocks
    for block in copy.hashed_blocks:
        codes[block.block_id] = CACHED
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
