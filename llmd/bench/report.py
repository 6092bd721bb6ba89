"""Turns a run's records and the daemon's before/after stats into figures, a table and JSON.

Every number printed is in the JSON too, with each request's raw timings, so a run can
be re-analysed without being re-run.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llmd.bench.capacity import capacity_line, rate_text, render_probes
from llmd.bench.latency_stats import summarize
from llmd.bench.request_record import ABORTED, FAILED, RequestRecord
from llmd.bench.slo import Slo, goodput
from llmd.protocol.metrics_sections import WindowSummary
from llmd.protocol.stats_snapshot import StatsSnapshot
from llmd.wait_breakdown import WAIT_REASONS, WaitBreakdown

LATENCIES = ("ttft", "tpot", "itl", "e2e")


def _ms(values: Sequence[float | None]) -> list[float]:
    return [value * 1000 for value in values if value is not None]


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def daemon_window(before: StatsSnapshot, after: StatsSnapshot) -> dict[str, Any]:
    """The daemon's counters over the run: hit rate, preemptions, batch size, GB/s, FLOP/s."""
    was, now, hardware, daemon = before.totals, after.totals, after.hardware, after.daemon
    num_steps = now.steps - was.steps
    prefix_hit_rate = None
    if before.kv is not None and after.kv is not None:  # None while an engine was dead
        prefix_hit_rate = _ratio(
            after.kv.prefix_hit_tokens - before.kv.prefix_hit_tokens,
            after.kv.prefix_query_tokens - before.kv.prefix_query_tokens,
        )
    return {
        "steps": num_steps,
        "preemptions": now.preemptions - was.preemptions,
        "prefix_hit_rate": prefix_hit_rate,
        "mean_batch_size": _ratio(now.scheduled_seqs - was.scheduled_seqs, num_steps),
        "decode_gb_per_s": _ratio(
            (now.decode_bytes - was.decode_bytes) * 1e-9, now.decode_seconds - was.decode_seconds
        ),
        "prefill_flop_per_s": _ratio(
            now.prefill_flops - was.prefill_flops, now.prefill_seconds - was.prefill_seconds
        ),
        "peak_gb_per_s": hardware.peak_gb_per_s,
        "peak_tflop_per_s": hardware.peak_tflop_per_s,
        "peak_source": hardware.peak_source,
        "latency_histograms_ms": {
            name: _summary_ms(after.latency.by_name(name)) for name in LATENCIES
        },
        "config": {
            "model": daemon.model,
            "device_name": daemon.device_name,
            "dtype": daemon.dtype,
            "max_num_batched_tokens": daemon.max_num_batched_tokens,
            "max_num_seqs": daemon.max_num_seqs,
        },
    }


def _summary_ms(summary: WindowSummary) -> dict[str, float | None]:
    """A daemon's window summary in milliseconds (its count stays a count)."""
    seconds = {"mean": summary.mean, "p50": summary.p50, "p90": summary.p90,
               "p99": summary.p99, "max": summary.max}  # fmt: skip
    milliseconds = {key: None if value is None else value * 1000 for key, value in seconds.items()}
    return {"count": summary.count, **milliseconds}


def server_waits(records: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """Seconds waited per reason over the requests whose server said why (None: none did)."""
    read = (WaitBreakdown.from_dict(record.server_waits) for record in records)
    breakdowns = [breakdown for breakdown in read if breakdown is not None]
    if not breakdowns:
        return None
    totals = {name: sum(b.wait_s[name] for b in breakdowns) for name in WAIT_REASONS}
    total = sum(totals.values())
    return {
        "num_requests": len(breakdowns),
        "wait_s": totals,
        "mean_wait_s": {name: value / len(breakdowns) for name, value in totals.items()},
        "share": {name: value / total if total else None for name, value in totals.items()},
    }


def build_result(
    records: Sequence[RequestRecord],
    slo: Slo,
    config: dict[str, Any],
    before: StatsSnapshot | None = None,
    after: StatsSnapshot | None = None,
) -> dict[str, Any]:
    """Every figure of a run, plus the raw records."""
    completed = [record for record in records if record.is_ok]
    sent = [record.sent_s for record in records]
    ended = [record.finished_s for record in records if record.finished_s is not None]
    duration_s = (max(ended) - min(sent)) if sent and ended else 0.0
    num_input = sum(record.num_prompt_tokens for record in completed)
    num_output = sum(record.num_output_tokens for record in completed)
    latency = {
        "ttft": summarize(_ms([r.ttft for r in completed])),
        "tpot": summarize(_ms([r.tpot for r in completed])),
        "itl": summarize(_ms([gap for r in completed for gap in r.itl])),
        "e2e": summarize(_ms([r.e2e for r in completed])),
    }
    server_latency = {
        name: summarize(_ms([r.server_timings.get(name) for r in completed]))
        for name in ("ttft", "tpot", "e2e")
    }
    errors = Counter(record.error for record in records if record.error)
    return {
        "config": config,
        "duration_s": duration_s,
        "num_requests": len(records),
        "num_completed": len(completed),
        "num_failed": sum(1 for record in records if record.status == FAILED),
        "num_aborted": sum(1 for record in records if record.status == ABORTED),
        "errors": dict(errors.most_common(10)),
        "throughput": {
            "requests_per_s": _ratio(len(completed), duration_s),
            "input_tokens_per_s": _ratio(num_input, duration_s),
            "output_tokens_per_s": _ratio(num_output, duration_s),
            "num_input_tokens": num_input,
            "num_output_tokens": num_output,
        },
        "latency_ms": latency,
        "server_latency_ms": server_latency,
        "server_waits": server_waits(completed),
        "goodput": {"slo_ms": slo.as_ms(), **goodput(records, slo, duration_s)},
        "daemon": None if before is None or after is None else daemon_window(before, after),
        "requests": [record.to_json() for record in records],
    }


def _fmt(value: float | int | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:,.{digits}f}"


def _si(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {prefix}{unit}"
    return f"{value:.2f} {unit}"


def render_table(result: dict[str, Any]) -> str:
    """The human summary of a run, about 30 lines wide enough for 80 columns."""
    throughput = result["throughput"]
    lines = [
        f"requests      {result['num_requests']} sent, {result['num_completed']} completed, "
        f"{result['num_failed']} failed, {result['num_aborted']} aborted "
        f"in {result['duration_s']:.2f} s",
        f"throughput    {_fmt(throughput['requests_per_s'], 2)} req/s, "
        f"input {_fmt(throughput['input_tokens_per_s'])} tok/s, "
        f"output {_fmt(throughput['output_tokens_per_s'])} tok/s",
    ]
    for error, count in result["errors"].items():
        lines.append(f"  error x{count}: {error}")
    lines.append("")
    lines.append(f"{'latency (ms)':<14}{'mean':>10}{'median':>10}{'p90':>10}{'p99':>10}{'max':>10}")
    for name in LATENCIES:
        row = result["latency_ms"][name]
        cells = "".join(f"{_fmt(row[key]):>10}" for key in ("mean", "median", "p90", "p99", "max"))
        lines.append(f"{name.upper():<14}{cells}")
    good = result["goodput"]
    slo_text = ", ".join(f"{k}<={v:g}ms" for k, v in good["slo_ms"].items() if v is not None)
    lines.append("")
    lines.append(
        f"goodput       {_fmt(good['requests_per_s'], 2)} req/s meet "
        f"{slo_text or 'no SLO (every completed request)'}"
        f" ({_fmt(None if good['fraction'] is None else good['fraction'] * 100)}% of requests)"
    )
    waits = result.get("server_waits")
    if waits and any(waits["share"].values()):
        reasons = sorted(WAIT_REASONS, key=lambda name: -(waits["share"][name] or 0))
        shares = " · ".join(
            f"{name} {waits['share'][name] * 100:.0f}%" for name in reasons if waits["share"][name]
        )
        total = sum(waits["wait_s"].values())
        lines.append(f"waits         {shares} of {total:.2f} s ({waits['num_requests']} requests)")
    daemon = result.get("daemon")
    if daemon:
        hit = daemon["prefix_hit_rate"]
        lines.append(
            f"daemon        prefix hit {_fmt(None if hit is None else hit * 100)}%, "
            f"preemptions {_fmt(daemon['preemptions'])}, "
            f"mean batch {_fmt(daemon['mean_batch_size'], 2)} seqs"
        )
        lines.append(
            f"              decode {_fmt(daemon['decode_gb_per_s'], 2)} GB/s, "
            f"prefill {_si(daemon['prefill_flop_per_s'], 'FLOP/s')} "
            f"(peaks {_fmt(daemon['peak_gb_per_s'], 1)} GB/s, "
            f"{_fmt(daemon['peak_tflop_per_s'], 3)} TFLOP/s, {daemon['peak_source']})"
        )
    capacity = result.get("capacity_at_slo")
    if capacity:
        shown = "the highest that passed" if capacity["rate_rps"] else "none passed: the lowest"
        lines[:0] = [f"the probe at {rate_text(result['config']['request_rate'])} req/s ({shown}):"]
        lines += ["", render_probes(capacity), capacity_line(capacity)]
    return "\n".join(lines)


def write_json(result: dict[str, Any], path: str | Path) -> None:
    """Write the whole result (figures and raw records) as indented JSON."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=1))
