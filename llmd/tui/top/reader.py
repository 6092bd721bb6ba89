"""Reading a stats snapshot (docs/protocol.md) into view values, tolerating missing keys.

A daemon whose engine died sends only some sections, and older or newer daemons may lack
or add keys; every read here falls back to None or zero instead of failing the screen.
"""

from __future__ import annotations

from typing import Any

from llmd.metrics import decode_block_map
from llmd.tui.top.view import (
    EfficiencyView,
    HeaderView,
    LatencyView,
    RequestRow,
    TimelineView,
)
from llmd.wait_breakdown import WAIT_REASONS, WaitBreakdown

LATENCY_NAMES = ("ttft", "tpot", "itl", "e2e", "queue")


def section(snapshot: dict[str, Any], name: str) -> dict[str, Any]:
    """A snapshot section as a dict (empty when absent or null)."""
    value = snapshot.get(name)
    return value if isinstance(value, dict) else {}


def number(values: dict[str, Any], key: str) -> float | None:
    """A numeric field, or None when absent or not a number."""
    value = values.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def integer(values: dict[str, Any], key: str) -> int:
    """An integer field, 0 when absent."""
    value = number(values, key)
    return 0 if value is None else int(value)


def text_or_none(values: dict[str, Any], key: str) -> str | None:
    """A string field, or None when absent or not a string."""
    value = values.get(key)
    return value if isinstance(value, str) else None


def reason_or_none(values: dict[str, Any]) -> str | None:
    """`waiting_on` when it is one of the known wait reasons."""
    value = values.get("waiting_on")
    return value if value in WAIT_REASONS else None


def read_header(snapshot: dict[str, Any]) -> HeaderView:
    """The header line: model, device, dtype, address, uptime, policy, budget."""
    daemon = section(snapshot, "daemon")
    budget = number(daemon, "max_num_batched_tokens")
    max_num_seqs = number(daemon, "max_num_seqs")
    in_flight = number(daemon, "num_in_flight")
    return HeaderView(
        model=daemon.get("model"),
        device=daemon.get("device"),
        dtype=daemon.get("dtype"),
        device_name=daemon.get("device_name"),
        attention_backend=daemon.get("attention_backend"),
        address=daemon.get("address"),
        uptime_s=number(daemon, "uptime_s"),
        state=daemon.get("state"),
        error=daemon.get("error"),
        scheduling_policy=daemon.get("scheduling_policy"),
        max_num_batched_tokens=None if budget is None else int(budget),
        max_num_seqs=None if max_num_seqs is None else int(max_num_seqs),
        num_in_flight=None if in_flight is None else int(in_flight),
        version=daemon.get("version"),
    )


def read_block_map(snapshot: dict[str, Any]) -> tuple[tuple[int, ...], tuple[str, ...], int]:
    """Decoded block-map cells, their owners, and blocks per cell (empty when absent)."""
    encoded = snapshot.get("block_map")
    if not isinstance(encoded, dict) or "runs" not in encoded:
        return (), (), 1
    cells = tuple(decode_block_map(encoded))
    owners = tuple(str(owner) for owner in encoded.get("owners", ()))
    return cells, owners, max(1, integer(encoded, "blocks_per_cell"))


def read_latency(snapshot: dict[str, Any]) -> LatencyView:
    """p50/p90/p99 of each latency and goodput against the daemon's SLOs."""
    latency = section(snapshot, "latency")
    goodput = section(snapshot, "goodput")
    percentiles = {}
    for name in LATENCY_NAMES:
        summary = section(latency, name)
        percentiles[name] = (
            number(summary, "p50"),
            number(summary, "p90"),
            number(summary, "p99"),
        )
    return LatencyView(
        percentiles=percentiles,
        window_s=number(snapshot, "window_s"),
        slo_ttft_ms=number(goodput, "slo_ttft_ms"),
        slo_tpot_ms=number(goodput, "slo_tpot_ms"),
        goodput_per_s=number(goodput, "requests_per_s"),
        goodput_fraction=number(goodput, "fraction"),
        num_good=integer(goodput, "num_good"),
        num_completed=integer(goodput, "num_completed"),
    )


def read_efficiency(snapshot: dict[str, Any]) -> EfficiencyView:
    """Busy share of wall time, achieved bandwidth and FLOP/s, and the peaks if reported."""
    hardware = section(snapshot, "hardware")
    throughput = section(snapshot, "throughput")
    step_time = section(section(snapshot, "step"), "time")
    steps_per_s = number(throughput, "steps_per_s")
    step_mean_s = number(step_time, "mean")
    busy = None
    if steps_per_s is not None and step_mean_s is not None:
        busy = min(1.0, steps_per_s * step_mean_s)
    return EfficiencyView(
        busy_fraction=busy,
        decode_gb_per_s=number(hardware, "decode_gb_per_s"),
        peak_gb_per_s=number(hardware, "peak_gb_per_s"),
        prefill_tflop_per_s=number(hardware, "prefill_tflop_per_s"),
        peak_tflop_per_s=number(hardware, "peak_tflop_per_s"),
        peak_source=hardware.get("peak_source")
        if isinstance(hardware.get("peak_source"), str)
        else None,
    )


def read_request(row: dict[str, Any]) -> RequestRow:
    """One row of the request table (live or recently finished)."""
    state = str(row.get("state", "?"))
    return RequestRow(
        request_id=str(row.get("request_id", "?")),
        state=state,
        num_prompt_tokens=integer(row, "num_prompt_tokens"),
        num_generated_tokens=integer(row, "num_generated_tokens"),
        max_tokens=integer(row, "max_tokens"),
        prefill_progress=number(row, "prefill_progress") or 0.0,
        decode_progress=number(row, "decode_progress") or 0.0,
        age_s=number(row, "age_s") or 0.0,
        ttft_s=number(row, "ttft_s"),
        num_preemptions=integer(row, "num_preemptions"),
        finish_reason=row.get("finish_reason"),
        is_finished=state == "finished",
        label=text_or_none(row, "label"),
        waiting_on=reason_or_none(row),
        wait_s=number(row, "wait_s") or 0.0,
    )


def read_requests(snapshot: dict[str, Any], max_recent: int) -> tuple[list[RequestRow], int]:
    """Live rows, then up to `max_recent` recently finished ones; and the live count."""
    live = [read_request(row) for row in snapshot.get("requests") or () if isinstance(row, dict)]
    recent = [read_request(row) for row in snapshot.get("recent") or () if isinstance(row, dict)]
    live_ids = {row.request_id for row in live}
    recent = [row for row in recent if row.request_id not in live_ids][:max_recent]
    num_live = snapshot.get("num_requests")
    return live + recent, int(num_live) if isinstance(num_live, int) else len(live)


def read_timeline(snapshot: dict[str, Any]) -> TimelineView | None:
    """The timeline of the request the subscription asked about, when present."""
    timeline = snapshot.get("timeline")
    if not isinstance(timeline, dict):
        return None
    events = tuple(
        (float(event[0]), str(event[1]), int(event[2]))
        for event in timeline.get("events") or ()
        if isinstance(event, (list, tuple)) and len(event) == 3
    )
    return TimelineView(
        request_id=str(timeline.get("request_id", "?")),
        state=str(timeline.get("state", "?")),
        age_s=number(timeline, "age_s") or 0.0,
        first_scheduled_s=number(timeline, "first_scheduled_s"),
        first_token_s=number(timeline, "first_token_s"),
        finished_s=number(timeline, "finished_s"),
        events=events,
        token_times_s=tuple(float(t) for t in timeline.get("token_times_s") or ()),
        num_tokens_total=integer(timeline, "num_tokens_total"),
        label=text_or_none(timeline, "label"),
        waiting_on=reason_or_none(timeline),
        waits=WaitBreakdown.from_dict(timeline.get("waits")),
    )
