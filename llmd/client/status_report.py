"""What `llmd status` and the chat's /stats show: a status report from a stats snapshot.

Pure functions of a typed snapshot, shared by the CLI and the TUI.
"""

from __future__ import annotations

from typing import TypedDict

from llmd.protocol.engine_sections import KVUsage, QueueCounts
from llmd.protocol.stats_snapshot import StatsSnapshot


class QueueReport(TypedDict):
    """The requests in flight at the daemon and the engine's three queues."""

    in_flight: int | None
    waiting: int | None
    running: int | None
    preempted: int | None


class KvReport(TypedDict):
    """KV-cache blocks by state, the share in use and the prefix-cache hit rate."""

    num_used: int | None
    num_cached: int | None
    num_free: int | None
    num_total: int | None
    usage: float | None
    prefix_hit_rate: float | None


class _StatusFields(TypedDict):
    running: bool
    state: str | None
    error: str | None
    address: str | None
    pid: int | None
    model: str | None
    device: str | None
    dtype: str | None
    max_model_len: int | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    version: str | None
    uptime_s: float | None
    tool_call_parser: str | None
    """How `tool_choice: auto` replies are read (None from a daemon that predates tools)."""
    kv_cache_dtype: str | None
    """The KV cache's element type (the model's from a daemon that predates the field)."""
    kv_bytes_per_token: int | None
    """KV-cache bytes one token takes across all layers, keys and values."""
    quantization: str | None
    """The checkpoint's weight quantization ("" for dense weights, and from a daemon that
    predates the field)."""
    weight_bytes: int | None
    """Bytes of the loaded weights (None from a daemon that predates the field)."""
    queue: QueueReport
    kv: KvReport


class MoeReport(TypedDict):
    """An MoE model's experts, how many a step touches, and how uneven their load is."""

    num_experts: int
    num_experts_per_token: int
    num_moe_layers: int
    experts_touched_per_step: float | None
    """(MoE layer, expert) pairs a step's tokens were routed to, over the metrics window."""
    max_imbalance: float | None
    """Busiest expert's tokens over the mean expert's, in the most uneven layer."""


class StatusReport(_StatusFields, total=False):
    """What `llmd status` shows (and prints with --json); None where the daemon had no value."""

    log_file: str | None
    """Added by `llmd status`, which knows where the daemon's log file is."""
    moe: MoeReport
    """Only for a mixture-of-experts model."""


def status_report(snapshot: StatsSnapshot) -> StatusReport:
    """The fields `llmd status` shows, from a stats snapshot (queue and kv None while dead)."""
    daemon, queue, kv = snapshot.daemon, snapshot.queue, snapshot.kv
    report: StatusReport = {
        "running": True,
        "state": daemon.state,
        "error": daemon.error,
        "address": daemon.address,
        "pid": daemon.pid,
        "model": daemon.model,
        "device": daemon.device,
        "dtype": daemon.dtype,
        "max_model_len": daemon.max_model_len,
        "max_num_seqs": daemon.max_num_seqs,
        "max_num_batched_tokens": daemon.max_num_batched_tokens,
        "version": daemon.version,
        "uptime_s": daemon.uptime_s,
        "tool_call_parser": daemon.tool_call_parser,
        "kv_cache_dtype": daemon.kv_dtype,
        "kv_bytes_per_token": daemon.kv_token_bytes,
        "quantization": daemon.quantization,
        "weight_bytes": daemon.weight_bytes or None,
        "queue": _queue_report(daemon.num_in_flight, queue),
        "kv": _kv_report(kv),
    }
    if daemon.num_experts:
        report["moe"] = {
            "num_experts": daemon.num_experts,
            "num_experts_per_token": daemon.num_experts_per_token,
            "num_moe_layers": daemon.num_moe_layers,
            "experts_touched_per_step": snapshot.hardware.experts_touched_per_step,
            "max_imbalance": None if snapshot.moe is None else snapshot.moe.max_imbalance,
        }
    return report


def _queue_report(num_in_flight: int, queue: QueueCounts | None) -> QueueReport:
    """The queue part; without an engine only the daemon's in-flight count is known."""
    if queue is None:
        return {"in_flight": num_in_flight, "waiting": None, "running": None, "preempted": None}
    return {
        "in_flight": num_in_flight,
        "waiting": queue.waiting,
        "running": queue.running,
        "preempted": queue.preempted,
    }


def _kv_report(kv: KVUsage | None) -> KvReport:
    """The KV part; every value None without an engine (a dead one has no pool)."""
    if kv is None:
        return {"num_used": None, "num_cached": None, "num_free": None, "num_total": None,
                "usage": None, "prefix_hit_rate": None}  # fmt: skip
    return {
        "num_used": kv.num_used,
        "num_cached": kv.num_cached,
        "num_free": kv.num_free,
        "num_total": kv.num_total,
        "usage": kv.usage,
        "prefix_hit_rate": kv.prefix_hit_rate,
    }


def format_status(report: StatusReport) -> str:
    """Human-readable lines of a status report (missing values print as '-')."""
    queue, kv = report["queue"], report["kv"]

    def show(value: object) -> str:
        return "-" if value is None else str(value)

    state = show(report["state"]) + (f" ({report['error']})" if report["error"] else "")
    kv_line = f"{show(kv['num_used'])}/{show(kv['num_total'])} blocks used"
    if kv["usage"] is not None:
        kv_line += f" ({kv['usage']:.0%})"
    kv_line += f", {show(kv['num_cached'])} cached, {show(kv['num_free'])} free"
    if kv["prefix_hit_rate"] is not None:
        kv_line += f"; prefix hit rate {kv['prefix_hit_rate']:.0%}"
    if report.get("kv_cache_dtype"):
        token_bytes = kv_token_text(report.get("kv_bytes_per_token"))
        kv_line += f"; {report['kv_cache_dtype']}, {token_bytes}"
    lines = [
        f"state     {state}",
        f"model     {show(report['model'])}  ({show(report['dtype'])} on "
        f"{show(report['device'])}, max_model_len {show(report['max_model_len'])})",
        f"address   {show(report['address'])}",
        f"pid       {show(report['pid'])}  up {_duration(report['uptime_s'])}",
        f"batch     at most {show(report.get('max_num_seqs'))} requests and "
        f"{show(report.get('max_num_batched_tokens'))} tokens per step",
        f"queue     {show(queue['in_flight'])} in flight: {show(queue['waiting'])} waiting, "
        f"{show(queue['running'])} running, {show(queue['preempted'])} preempted",
        f"kv cache  {kv_line}",
        f"weights   {_weights_line(report)}",
        f"tools     calls of tool_choice auto read as {show(report.get('tool_call_parser'))}",
        *_experts_lines(report),
        f"log       {report.get('log_file') or 'stderr of the `llmd serve` process'}",
    ]
    return "\n".join(lines)


def _experts_lines(report: StatusReport) -> list[str]:
    """The `experts` line of an MoE model's status; none for a dense model."""
    moe = report.get("moe")
    if moe is None:
        return []
    line = (
        f"experts   top-{moe['num_experts_per_token']} of {moe['num_experts']} in "
        f"{moe['num_moe_layers']} MoE layers"
    )
    touched = moe["experts_touched_per_step"]
    if touched is not None:
        line += f"; {touched:.1f} (layer, expert) pairs touched per step"
    if moe["max_imbalance"] is not None:
        line += f"; busiest expert {moe['max_imbalance']:.2f}x the mean"
    return [line]


def _weights_line(report: StatusReport) -> str:
    """'awq w4a16-g128, 96.3 MB' or 'dense, 538.1 MB' ('-' for what the daemon did not say)."""
    quantization = report.get("quantization")
    kind = "-" if quantization is None else quantization or "dense"
    return f"{kind}, {weight_size_text(report.get('weight_bytes'))}"


def weight_size_text(weight_bytes: int | None) -> str:
    """'96.3 MB' for the loaded weights ('-' when the daemon did not say).

    `llmd status` and top's header both print it, so the two never word a size apart.
    """
    return "-" if weight_bytes is None else f"{weight_bytes / 1e6:.1f} MB"


def kv_token_text(kv_bytes_per_token: int | None) -> str:
    """'1024 B/token': the KV cache's bytes per token across all layers ('- B/token' unknown).

    `llmd status` and top's header both print it, so the two never word a size apart.
    """
    return f"{'-' if kv_bytes_per_token is None else kv_bytes_per_token} B/token"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
