"""Fixed, realistic stats snapshots (typed, read from the keys of docs/protocol.md) for the
`llmd top` tests.

Snapshot i of a run is a pure function of i, so sparklines, tables and the block map
render the same on every machine; shapes follow a real daemon's snapshot under load.
`busy_wire` gives the wire map, for tests that change a key before reading it with `typed`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from llmd.metrics import CACHED, FREE, SHARED, encode_block_map
from llmd.protocol import StatsSnapshot
from llmd.protocol.engine_sections import RequestRow

WAITING = [0, 0, 1, 2, 2, 3, 5, 4, 6, 7, 8, 8, 9, 11, 12, 12, 13, 15, 16, 18]
RUNNING = [2, 4, 6, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8]
LIVE_IDS = ["req-11", "req-12", "req-13", "req-14", "req-15", "req-16"]


def _latency(p50: float, p90: float, p99: float, count: int = 40) -> dict[str, float | int]:
    return {"count": count, "mean": p50 * 1.1, "p50": p50, "p90": p90, "p99": p99, "max": p99}


def _request(index: int, request_id: str, step: int) -> dict[str, Any]:
    """A live request: the first four run (decoding), then one prefilling, one waiting."""
    if index < 4:
        state, generated, computed_share = "running", 10 + 7 * index + step, 1.0
    elif index == 4:
        state, generated, computed_share = "running", 0, 0.5
    else:
        state, generated, computed_share = "waiting", 0, 0.0
    prompt = 40 + 13 * index
    return {
        "request_id": request_id,
        "client_id": f"c-{index}",
        "label": None,
        "state": state,
        "waiting_on": None,
        "wait_s": 0.0,
        "finish_reason": None,
        "priority": 0,
        "num_prompt_tokens": prompt,
        "num_generated_tokens": generated,
        "max_tokens": 128,
        "num_computed_tokens": int(prompt * computed_share) + generated,
        "num_cached_tokens": 16 if index % 2 else 0,
        "num_blocks": 3 + index,
        "num_preemptions": 1 if index == 1 else 0,
        "prefill_progress": computed_share,
        "decode_progress": generated / 128,
        "age_s": 4.0 - 0.5 * index + 0.25 * step,
        "ttft_s": 0.05 + 0.01 * index if generated else None,
    }


def _recent(index: int) -> dict[str, Any]:
    return {
        "request_id": f"req-{10 - index}",
        "client_id": None,
        "label": None,
        "state": "finished",
        "waiting_on": None,
        "wait_s": 0.0,
        "finish_reason": "length" if index else "stop",
        "priority": 0,
        "num_prompt_tokens": 52,
        "num_generated_tokens": 128 if index else 61,
        "max_tokens": 128,
        "num_computed_tokens": 180,
        "num_cached_tokens": 32,
        "num_blocks": 0,
        "num_preemptions": 0,
        "prefill_progress": 1.0,
        "decode_progress": 1.0 if index else 61 / 128,
        "age_s": 2.5 + index,
        "ttft_s": 0.061,
    }


def _block_map() -> dict[str, Any]:
    codes = [SHARED] * 2 + [CACHED] * 10
    for owner in range(5):
        codes += [owner] * (4 + owner)
    codes += [FREE] * (128 - len(codes))
    return dataclasses.replace(encode_block_map(codes), owners=tuple(LIVE_IDS[:5])).to_wire()


def timeline(request_id: str, step: int) -> dict[str, Any]:
    """A decoding request that was preempted once and resumed."""
    age = 4.0 + 0.25 * step
    num_resumed = int((age - 2.2) / 0.1)
    tokens = [0.3 + 0.02 * i for i in range(40)] + [2.2 + 0.1 * i for i in range(num_resumed)]
    return {
        "request_id": request_id,
        "label": None,
        "state": "running",
        "waiting_on": None,
        "waits": {
            "wait_s": {"queue": 0.2},
            "num_wait_steps": {"queue": 1},
            "num_prefill_chunks": 3,
            "prefill_chunk_sizes": [32, 20, 72],
            "num_prefill_tokens": 124,
            "num_preemptions": 1,
        },
        "age_s": age,
        "first_scheduled_s": 0.2,
        "first_token_s": 0.3,
        "finished_s": None,
        "events": [
            [0.2, "prefill", 32],
            [0.25, "prefill", 20],
            [1.2, "preempted", 0],
            [2.0, "prefill", 72],
        ],
        "token_times_s": tokens,
        "num_tokens_total": len(tokens),
    }


def busy_wire(step: int, timeline_request_id: str | None = None) -> dict[str, Any]:
    """Snapshot number `step` of a daemon under growing load (0 <= step < len(WAITING)),
    as the wire map."""
    waiting = WAITING[step % len(WAITING)]
    running = RUNNING[step % len(RUNNING)]
    snapshot: dict[str, Any] = {
        "time": 1_800_000_000.0 + 0.25 * step,
        "window_s": 60.0,
        "daemon": {
            "pid": 4242,
            "instance_id": "sample-daemon",
            "address": "ipc:///run/user/1000/llmd/llmd.sock",
            "model": "/models/tiny-llama",
            "device": "cpu",
            "dtype": "float32",
            "device_name": "cpu",
            "attention_backend": "torch",
            "max_model_len": 256,
            "num_params": 125248,
            "weight_bytes": 4 * 125248,  # float32
            "version": "0.1.0",
            "protocol_version": 1,
            "block_size": 16,
            "num_blocks": 128,
            "vocab_size": 32000,
            "hidden_size": 64,
            "num_layers": 2,
            "num_kv_heads": 2,
            "head_dim": 16,
            "is_tied": True,
            "async_scheduling": False,
            "admission": "queue",
            "num_refused_by_admission": 0,
            "state": "ok",
            "error": None,
            "uptime_s": 187.0,
            "num_in_flight": waiting + running,
            "max_queued_requests": 1024,
            "num_subscriptions": 1,
            "scheduling_policy": "fcfs",
            "max_num_batched_tokens": 2048,
            "max_num_seqs": 8,
        },
        "queue": {
            "waiting": waiting,
            "running": running,
            "preempted": 1 if step > 10 else 0,
            "preemptions_total": max(0, step - 8),
        },
        "kv": {
            "block_size": 16,
            "num_total": 128,
            "num_used": 122,
            "num_cached": 4,
            "num_free": 2,
            "usage": 122 / 128,
            "prefix_query_tokens": 900,
            "prefix_hit_tokens": 300,
            "prefix_hit_rate": 1 / 3,
        },
        "latency": {
            "ttft": _latency(0.056, 0.21, 0.48),
            "tpot": _latency(0.0062, 0.0071, 0.0093),
            "itl": _latency(0.0045, 0.012, 0.031, count=900),
            "e2e": _latency(0.66, 1.4, 2.1),
            "queue": _latency(0.0024, 0.15, 0.41),
        },
        "goodput": {
            "slo_ttft_ms": 200.0,
            "slo_tpot_ms": 10.0,
            "requests_per_s": 3.1,
            "fraction": 0.85,
            "num_good": 34,
            "num_completed": 40,
        },
        "throughput": {
            "prompt_tokens_per_s": 480.0,
            "generation_tokens_per_s": 543.3,
            "requests_per_s": 3.66,
            "steps_per_s": 137.4,
            "prompt_tokens_per_step": 6.2,
            "generation_tokens_per_step": 3.95,
        },
        "step": {
            "time": _latency(0.0039, 0.009, 0.0172, count=150),
            "schedule_ms": 0.06,
            "prepare_ms": 1.28,
            "forward_ms": 3.69,
            "sample_ms": 0.25,
            "idle_gap_ms": 0.9,
            "prefill_time_share": 0.35,
        },
        "hardware": {
            "decode_gb_per_s": 0.187,
            "prefill_tflop_per_s": 0.00064,
            "peak_gb_per_s": None,
            "peak_tflop_per_s": None,
            "peak_source": "unknown",
        },
        "totals": {
            "steps": 150 * step,
            "prompt_tokens": 900 * step + (step % 3) * 40,
            "generation_tokens": 590 * step,
            "preemptions": max(0, step - 8),
            "finished": {"length": 30, "stop": 10},
        },
        "requests": [_request(i, rid, step) for i, rid in enumerate(LIVE_IDS)],
        "num_requests": len(LIVE_IDS),
        "recent": [_recent(i) for i in range(3)],
        "block_map": _block_map(),
        "snapshot_version": 2,
    }
    if timeline_request_id is not None:
        snapshot["timeline"] = timeline(timeline_request_id, step)
    return snapshot


def typed(wire: dict[str, Any]) -> StatsSnapshot:
    """A wire map read as the typed snapshot the client yields."""
    return StatsSnapshot.from_wire(wire)


def busy_snapshot(step: int, timeline_request_id: str | None = None) -> StatsSnapshot:
    """Snapshot number `step` of `busy_wire`, typed."""
    return typed(busy_wire(step, timeline_request_id))


def speculating_snapshot(step: int, timeline_request_id: str | None = None) -> StatsSnapshot:
    """`busy_snapshot(step)` of a daemon running speculative decoding: every 0.25 s, 40
    drafts of 3 tokens with 30 accepted, in 100 decode steps (25% accepted, 1.75 tokens per
    verify step, 1.30 per decode step)."""
    wire = busy_wire(step, timeline_request_id)
    wire["totals"].update(spec_drafts=40 * step, spec_draft_tokens=120 * step,
                          spec_accepted_tokens=30 * step, decode_seqs=100 * step)  # fmt: skip
    return typed(wire)


def request_row(request_id: str, state: str, **fields: Any) -> RequestRow:
    """A request-table row with zeros where `fields` says nothing (for hand-built views)."""
    defaults: dict[str, Any] = {
        "label": None, "waiting_on": None, "wait_s": 0.0, "finish_reason": None,
        "priority": 0, "num_prompt_tokens": 0, "num_generated_tokens": 0, "max_tokens": 0,
        "num_computed_tokens": 0, "num_cached_tokens": 0, "num_blocks": 0,
        "num_preemptions": 0, "prefill_progress": 0.0, "decode_progress": 0.0, "age_s": 0.0,
        "ttft_s": None,
    }  # fmt: skip
    return RequestRow(request_id=request_id, state=state, **{**defaults, **fields})
