"""The fleet view of `llmd top`: one summary row per daemon and the totals across them.

Built from each daemon's TopModel (its latest snapshot and link state) and the time its
last snapshot arrived, with no Textual import, so the rows and their health rules are
tested on plain data. Percentiles of separate windows cannot be merged, so the totals row
shows the worst daemon's; counts and rates are summed, KV use and prefix hits are pooled.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmd.protocol import StatsSnapshot
from llmd.tui.top.model import TopModel

UP, DOWN, CONNECTING = "up", "down", "connecting"
"""Health values besides the engine's own non-ok states (warming, draining, dead)."""


@dataclass(frozen=True)
class DaemonRow:
    """One daemon's line: health and the figures a fleet operator compares."""

    address: str
    health: str
    """up, down, connecting, or the engine's state when not ok (warming, draining, dead)."""
    model_name: str | None = None
    waiting: int | None = None
    running: int | None = None
    kv_usage: float | None = None
    prefix_hit_rate: float | None = None
    decode_tokens_per_s: float | None = None
    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    tpot_p50_s: float | None = None
    tpot_p99_s: float | None = None
    reason: str = ""
    """Why a daemon is down (the link's last error or how long it has been silent)."""


@dataclass(frozen=True)
class FleetView:
    """Everything the fleet table shows; `selected_index` is the cursor's row."""

    rows: tuple[DaemonRow, ...]
    totals: DaemonRow
    num_up: int
    selected_index: int = 0


def daemon_row(
    address: str, model: TopModel, silence_s: float | None, down_after_s: float
) -> DaemonRow:
    """The row of one daemon; `silence_s` is how long since its last snapshot (None: never)."""
    snapshot = model.snapshot
    connection = model.connection
    if connection.status == "lost":
        return _with_figures(DaemonRow(address, DOWN, reason=connection.message), snapshot)
    if snapshot is None or silence_s is None:
        return DaemonRow(address, CONNECTING)
    if silence_s > down_after_s:
        return _with_figures(DaemonRow(address, DOWN, reason=f"silent {silence_s:.1f}s"), snapshot)
    state = snapshot.daemon.state
    return _with_figures(DaemonRow(address, UP if state == "ok" else state), snapshot)


def _with_figures(row: DaemonRow, snapshot: StatsSnapshot | None) -> DaemonRow:
    """`row` with the figures of `snapshot` (a down daemon keeps its last ones, dimmed)."""
    if snapshot is None:
        return row
    kv, queue = snapshot.kv, snapshot.queue
    ttft, tpot = snapshot.latency.by_name("ttft"), snapshot.latency.by_name("tpot")
    model_name = (snapshot.daemon.model or "").rstrip("/").rsplit("/", 1)[-1] or None
    return DaemonRow(
        address=row.address,
        health=row.health,
        reason=row.reason,
        model_name=model_name,
        waiting=None if queue is None else queue.waiting,
        running=None if queue is None else queue.running,
        kv_usage=None if kv is None else kv.usage,
        prefix_hit_rate=None if kv is None else kv.prefix_hit_rate,
        decode_tokens_per_s=snapshot.throughput.generation_tokens_per_s,
        ttft_p50_s=ttft.p50,
        ttft_p99_s=ttft.p99,
        tpot_p50_s=tpot.p50,
        tpot_p99_s=tpot.p99,
    )


def fleet_totals(rows: list[DaemonRow], models: list[TopModel]) -> DaemonRow:
    """Sums of the up daemons' counts and rates, pooled KV use and prefix hits, and the
    worst p50/p99 (None where no daemon is up)."""
    up = [(row, model) for row, model in zip(rows, models) if row.health == UP]
    kv_sections = [model.snapshot.kv for _, model in up if model.snapshot and model.snapshot.kv]
    num_total = sum(kv.num_total for kv in kv_sections)
    num_queried = sum(kv.prefix_query_tokens for kv in kv_sections)
    up_rows = [row for row, _ in up]
    return DaemonRow(
        address=f"fleet {len(up)}/{len(rows)} up",
        health=UP if up else DOWN,
        waiting=_count([row.waiting for row in up_rows]),
        running=_count([row.running for row in up_rows]),
        kv_usage=sum(kv.num_used for kv in kv_sections) / num_total if num_total else None,
        prefix_hit_rate=(
            sum(kv.prefix_hit_tokens for kv in kv_sections) / num_queried if num_queried else None
        ),
        decode_tokens_per_s=_total([row.decode_tokens_per_s for row in up_rows]),
        ttft_p50_s=_worst([row.ttft_p50_s for row in up_rows]),
        ttft_p99_s=_worst([row.ttft_p99_s for row in up_rows]),
        tpot_p50_s=_worst([row.tpot_p50_s for row in up_rows]),
        tpot_p99_s=_worst([row.tpot_p99_s for row in up_rows]),
    )


def _count(values: list[int | None]) -> int | None:
    known = [value for value in values if value is not None]
    return sum(known) if known else None


def _total(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) if known else None


def _worst(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return max(known) if known else None
