"""The soak report as a Markdown table: one row per scenario with its key figures.

docs/reliability.md carries the figures of the last full run; rendering them from the
JSON report keeps the document and the measurement the same numbers.
"""

from __future__ import annotations

from typing import Any

KEY_FIGURES: dict[str, tuple[str, ...]] = {
    "concurrency": ("num_sent", "num_completed", "num_failed", "used_blocks_at_idle"),
    "aborts": ("num_aborts", "num_freed", "freed_p50_ms", "freed_max_ms"),
    "lifecycles": (
        "num_lifecycles", "num_unexpected", "used_blocks_at_idle",
        "rss_kb_after_warmup", "rss_kb_max_after_warmup", "rss_growth_after_warmup",
    ),
    "malformed_frames": (
        "num_sent", "num_replies", "num_unanswered", "num_non_error_replies", "codes",
        "frames_per_s",
    ),
    "bad_requests": ("num_sent", "num_typed_naming_field", "failures"),
    "stats_subscriptions": (
        "num_subscriptions", "interval_ms", "unloaded_p50_ms", "loaded_p50_ms", "p50_ratio",
    ),
    "connections": (
        "num_connections", "daemon_soft_nofile", "num_health_answered", "daemon_peak_fds",
        "daemon_returncode",
    ),
    "crash_restart": (
        "num_kills", "num_streams", "outcomes", "told_max_s", "restart_s_max",
        "downtime_requests", "rounds_where_new_daemon_ran_old_requests",
    ),
}  # fmt: skip


def markdown_table(report: dict[str, Any]) -> str:
    """| scenario | verdict | figures | for every scenario in the report."""
    lines = ["| scenario | verdict | figures |", "|---|---|---|"]
    for scenario in report["scenarios"]:
        counts = scenario["counts"]
        keys = KEY_FIGURES.get(scenario["name"], tuple(counts))
        figures = "; ".join(f"{key} {_short(counts.get(key))}" for key in keys if key in counts)
        verdict = (
            "pass"
            if scenario["passed"]
            else "**FAIL**: "
            + ", ".join(promise for promise, is_held in scenario["checks"].items() if not is_held)
        )
        lines.append(f"| {scenario['name']} | {verdict} | {figures} |")
    return "\n".join(lines)


def _short(value: Any) -> str:
    text = str(value).replace("|", "/")
    return text if len(text) <= 160 else text[:157] + "..."
