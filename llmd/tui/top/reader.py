"""Reading a typed stats snapshot into the view values the panels draw.

The snapshot's types (llmd.protocol.stats_snapshot) already say what is there; what is
left here is the None of a dead engine's queue and KV sections, and of request tables
the subscription did not ask for, each handled once.
"""

from __future__ import annotations

import dataclasses

from llmd.metrics.serving_metrics import LATENCY_NAMES
from llmd.protocol import StatsSnapshot
from llmd.protocol.engine_sections import QueueCounts, RequestRow
from llmd.tui.top.view import EfficiencyView, GrammarView, KVView, LatencyView

NO_QUEUE = QueueCounts(waiting=0, running=0, preempted=0, preemptions_total=0)
"""The queue counts shown while the engine is dead (the snapshot has none)."""


def read_queue(snapshot: StatsSnapshot) -> QueueCounts:
    """The queue counts, zero while the engine is dead."""
    return snapshot.queue or NO_QUEUE


def read_kv(snapshot: StatsSnapshot, usage_history: tuple[float, ...]) -> KVView:
    """KV occupancy (empty while the engine is dead) and the block map when one was sent."""
    kv, block_map = snapshot.kv, snapshot.block_map
    view = KVView(usage_history=usage_history)
    if block_map is not None:
        view = dataclasses.replace(
            view,
            cells=tuple(block_map.cells()),
            owners=block_map.owners,
            blocks_per_cell=max(1, block_map.blocks_per_cell),
        )
    if kv is not None:
        view = dataclasses.replace(
            view,
            block_size=kv.block_size,
            num_total=kv.num_total,
            num_used=kv.num_used,
            num_cached=kv.num_cached,
            num_free=kv.num_free,
            usage=kv.usage,
            prefix_hit_rate=kv.prefix_hit_rate,
        )
    return view


def read_grammar(snapshot: StatsSnapshot) -> GrammarView | None:
    """Constrained requests and compile times; None before the first constrained request."""
    grammar = snapshot.grammar
    if grammar is None or grammar.num_requests == 0:
        return None
    compile_time = grammar.compile_time
    return GrammarView(
        num_requests=grammar.num_requests,
        num_compiles=grammar.num_compiles,
        num_cache_hits=grammar.num_cache_hits,
        num_failed=grammar.num_compile_failures + grammar.num_compile_timeouts,
        compile_p50_s=compile_time.p50,
        compile_p90_s=compile_time.p90,
        compile_p99_s=compile_time.p99,
    )


def read_latency(snapshot: StatsSnapshot) -> LatencyView:
    """p50/p90/p99 of each latency and goodput against the daemon's SLOs."""
    goodput = snapshot.goodput
    summaries = {name: snapshot.latency.by_name(name) for name in LATENCY_NAMES}
    return LatencyView(
        percentiles={name: (s.p50, s.p90, s.p99) for name, s in summaries.items()},
        window_s=snapshot.window_s,
        slo_ttft_ms=goodput.slo_ttft_ms,
        slo_tpot_ms=goodput.slo_tpot_ms,
        goodput_per_s=goodput.requests_per_s,
        goodput_fraction=goodput.fraction,
        num_good=goodput.num_good,
        num_completed=goodput.num_completed,
    )


def read_efficiency(snapshot: StatsSnapshot) -> EfficiencyView:
    """Busy share of wall time, achieved bandwidth and FLOP/s, and the peaks if reported."""
    hardware = snapshot.hardware
    step_mean_s = snapshot.step.time.mean
    busy = None if step_mean_s is None else min(1.0, snapshot.throughput.steps_per_s * step_mean_s)
    return EfficiencyView(
        busy_fraction=busy,
        decode_gb_per_s=hardware.decode_gb_per_s,
        peak_gb_per_s=hardware.peak_gb_per_s,
        prefill_tflop_per_s=hardware.prefill_tflop_per_s,
        peak_tflop_per_s=hardware.peak_tflop_per_s,
        peak_source=hardware.peak_source,
        experts_touched_per_step=hardware.experts_touched_per_step,
        num_expert_slots=hardware.num_expert_slots,
    )


def read_requests(snapshot: StatsSnapshot, max_recent: int) -> tuple[list[RequestRow], int]:
    """Live rows, then up to `max_recent` recently finished ones; and the live count."""
    live = list(snapshot.requests or ())
    live_ids = {row.request_id for row in live}
    recent = [row for row in snapshot.recent or () if row.request_id not in live_ids]
    num_live = snapshot.num_requests
    return live + recent[:max_recent], len(live) if num_live is None else num_live
