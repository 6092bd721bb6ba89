"""What `llmd status` and the chat's /stats show: a status report from a stats snapshot.

Pure functions of the snapshot dict, shared by the CLI and the TUI.
"""

from __future__ import annotations

from typing import Any, TypedDict


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
    queue: QueueReport
    kv: KvReport


class StatusReport(_StatusFields, total=False):
    """What `llmd status` shows (and prints with --json); None where the daemon had no value."""

    log_file: str | None
    """Added by `llmd status`, which knows where the daemon's log file is."""


def status_report(snapshot: dict[str, Any]) -> StatusReport:
    """The fields `llmd status` shows, from a stats snapshot."""
    daemon = snapshot.get("daemon", {})
    queue = snapshot.get("queue", {})
    kv = snapshot.get("kv", {})
    return {
        "running": True,
        "state": daemon.get("state"),
        "error": daemon.get("error"),
        "address": daemon.get("address"),
        "pid": daemon.get("pid"),
        "model": daemon.get("model"),
        "device": daemon.get("device"),
        "dtype": daemon.get("dtype"),
        "max_model_len": daemon.get("max_model_len"),
        "max_num_seqs": daemon.get("max_num_seqs"),
        "max_num_batched_tokens": daemon.get("max_num_batched_tokens"),
        "version": daemon.get("version"),
        "uptime_s": daemon.get("uptime_s"),
        "queue": {
            "in_flight": daemon.get("num_in_flight"),
            "waiting": queue.get("waiting"),
            "running": queue.get("running"),
            "preempted": queue.get("preempted"),
        },
        "kv": {
            "num_used": kv.get("num_used"),
            "num_cached": kv.get("num_cached"),
            "num_free": kv.get("num_free"),
            "num_total": kv.get("num_total"),
            "usage": kv.get("usage"),
            "prefix_hit_rate": kv.get("prefix_hit_rate"),
        },
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
        f"log       {report.get('log_file') or 'stderr of the `llmd serve` process'}",
    ]
    return "\n".join(lines)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
