"""The headless state of `llmd top`: snapshot history, selection, sort order, connection.

Snapshots are windowed summaries; the model turns successive snapshots into per-interval
series (tokens per step, tokens per second, queue lengths) and builds one TopView that
the panels draw, with no Textual import, so it is tested on plain data.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable

from llmd.protocol import StatsSnapshot
from llmd.protocol.engine_sections import RequestRow
from llmd.tui.top.hints import find_hints
from llmd.tui.top.reader import (
    read_efficiency,
    read_grammar,
    read_kv,
    read_latency,
    read_queue,
    read_requests,
)
from llmd.tui.top.sorting import SORT_KEYS, sort_rows
from llmd.tui.top.speculation import SpecCounts, SpecHistory
from llmd.tui.top.view import (
    ConnectionView,
    QueueView,
    StepView,
    ThroughputView,
    TopView,
)

HISTORY_LENGTH = 240
"""Samples kept for sparklines (a minute at four snapshots per second)."""
TREND_WINDOW_S = 10.0
"""Queue growth and recent preemptions look this far back."""
MAX_RECENT_ROWS = 8
"""Finished requests listed below the live ones."""
SERIES = (
    "time", "waiting", "running", "preempted", "preemptions_total", "kv_usage",
    "prompt_per_step", "generation_per_step", "prompt_per_s", "generation_per_s",
)  # fmt: skip


def slope(times: list[float], values: list[float]) -> float | None:
    """Least-squares slope of values over times (None with fewer than 2 distinct times)."""
    if len(times) < 2:
        return None
    mean_t = sum(times) / len(times)
    mean_v = sum(values) / len(values)
    spread = sum((t - mean_t) ** 2 for t in times)
    if spread == 0:
        return None
    return sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values)) / spread


class TopModel:
    """Applies snapshots and user actions; `view()` is what the screen shows."""

    def __init__(
        self, history_length: int = HISTORY_LENGTH, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._clock = clock
        self.history: dict[str, deque[float]] = {
            name: deque(maxlen=history_length) for name in SERIES
        }
        self.snapshot: StatsSnapshot | None = None
        self._read_rows: tuple[object, str, list[RequestRow], int] | None = None
        """(snapshot, sort key, sorted rows, live count) of the last table read."""
        self._previous_totals: tuple[float, float, float, float] | None = None
        self._speculation = SpecHistory()
        """Speculation counts over the daemon's metrics window, for figures that follow the
        workload (the snapshot's own are totals since start)."""
        self.sort_key = SORT_KEYS[0]
        self.selected_request_id: str | None = None
        self._selected_index = 0
        self._is_selection_manual = False
        """False until the user moves the selection (an automatic one moves on by itself)."""
        self.is_paused = False
        self.best_rates: dict[str, float] = {}
        """Highest decode_gb_per_s and prefill_tflop_per_s seen (a yardstick without peaks)."""
        self.connection = ConnectionView()
        self._last_update: float | None = None

    # ------------------------------------------------------------------ inputs

    def apply(self, snapshot: StatsSnapshot) -> None:
        """Take a new snapshot: extend the history and keep the selection valid."""
        self.snapshot = snapshot
        self._last_update = self._clock()
        self._record(snapshot)
        self._keep_selection(self._rows())

    def set_live(self) -> None:
        """Snapshots are arriving."""
        self.connection = dataclasses.replace(
            self.connection, status="live", message="", retry_in_s=None, num_attempts=0
        )

    def set_lost(self, message: str, retry_in_s: float, num_attempts: int) -> None:
        """The daemon went away; a reconnect is due in `retry_in_s`."""
        self.connection = dataclasses.replace(
            self.connection,
            status="lost",
            message=message,
            retry_in_s=retry_in_s,
            num_attempts=num_attempts,
        )

    def toggle_pause(self) -> None:
        """Freeze (or unfreeze) the screen; snapshots keep arriving in the background."""
        self.is_paused = not self.is_paused

    def cycle_sort(self) -> None:
        """Sort the request table by the next column."""
        index = SORT_KEYS.index(self.sort_key)
        self.sort_key = SORT_KEYS[(index + 1) % len(SORT_KEYS)]
        self._keep_selection(self._rows())

    def move_selection(self, delta: int) -> None:
        """Select the row `delta` rows below (negative: above) the selected one."""
        rows = self._rows()
        if not rows:
            return
        index = self._index_of(rows, self.selected_request_id)
        start = self._selected_index if index is None else index
        self._selected_index = max(0, min(len(rows) - 1, start + delta))
        self.selected_request_id = rows[self._selected_index].request_id
        self._is_selection_manual = True

    # ------------------------------------------------------------------ output

    def view(self) -> TopView:
        """The screen's state now."""
        connection = dataclasses.replace(
            self.connection,
            is_paused=self.is_paused,
            last_update_age_s=None
            if self._last_update is None
            else self._clock() - self._last_update,
        )
        snapshot = self.snapshot
        if snapshot is None:
            return TopView(connection=connection, sort_key=self.sort_key)
        rows = self._rows()
        timeline = snapshot.timeline
        if timeline is not None and timeline.request_id != self.selected_request_id:
            timeline = None  # a snapshot taken before the selection changed
        view = TopView(
            header=snapshot.daemon,
            queue=self._queue_view(snapshot),
            kv=read_kv(snapshot, tuple(self.history["kv_usage"])),
            steps=self._step_view(snapshot),
            throughput=self._throughput_view(snapshot),
            latency=read_latency(snapshot),
            efficiency=dataclasses.replace(
                read_efficiency(snapshot),
                best_decode_gb_per_s=self.best_rates.get("decode_gb_per_s"),
                best_prefill_tflop_per_s=self.best_rates.get("prefill_tflop_per_s"),
            ),
            requests=tuple(rows),
            num_live_requests=self._read_table()[1],
            selected_request_id=self.selected_request_id,
            sort_key=self.sort_key,
            timeline=timeline,
            connection=connection,
            has_snapshot=True,
        )
        return dataclasses.replace(view, hints=find_hints(view))

    # ------------------------------------------------------------------ internals

    def _rows(self) -> list[RequestRow]:
        return self._read_table()[0]

    def _read_table(self) -> tuple[list[RequestRow], int]:
        """The sorted rows and the live count, read once per snapshot and sort key (applying
        a snapshot and drawing it each need them)."""
        if self.snapshot is None:
            return [], 0
        cached = self._read_rows
        if cached is None or cached[0] is not self.snapshot or cached[1] != self.sort_key:
            rows, num_live = read_requests(self.snapshot, MAX_RECENT_ROWS)
            cached = (self.snapshot, self.sort_key, sort_rows(rows, self.sort_key), num_live)
            self._read_rows = cached
        return list(cached[2]), cached[3]

    @staticmethod
    def _index_of(rows: list[RequestRow], request_id: str | None) -> int | None:
        for index, row in enumerate(rows):
            if row.request_id == request_id:
                return index
        return None

    def _keep_selection(self, rows: list[RequestRow]) -> None:
        """Follow the top row until the user moves; then the user's choice sticks.

        The top row is a live request (live rows sort first), so an automatic selection
        never drags the table down to finished rows. A request the user selected stays
        selected even after it left the table (its timeline stays on screen while the
        daemon remembers it), so under heavy churn the selection never wanders off.
        """
        index = self._index_of(rows, self.selected_request_id)
        if not self._is_selection_manual:  # until the user moves, the top (live) row
            self.selected_request_id = rows[0].request_id if rows else None
            self._selected_index = 0
        elif index is not None:
            self._selected_index = index

    def _record(self, snapshot: StatsSnapshot) -> None:
        queue, kv, totals = read_queue(snapshot), snapshot.kv, snapshot.totals
        throughput, hardware = snapshot.throughput, snapshot.hardware
        now = snapshot.time
        current = (
            now,
            float(totals.steps),
            float(totals.prompt_tokens),
            float(totals.generation_tokens),
        )
        for key, value in (
            ("decode_gb_per_s", hardware.decode_gb_per_s),
            ("prefill_tflop_per_s", hardware.prefill_tflop_per_s),
        ):
            if value is not None and value > self.best_rates.get(key, 0.0):
                self.best_rates[key] = value
        rates = (  # the first point (or after a restart): the window's averages
            throughput.prompt_tokens_per_step or 0.0,
            throughput.generation_tokens_per_step or 0.0,
            throughput.prompt_tokens_per_s,
            throughput.generation_tokens_per_s,
        )
        if self._previous_totals is not None:
            d_time, d_steps, d_prompt, d_generation = (
                a - b for a, b in zip(current, self._previous_totals)
            )
            if d_steps >= 0 and d_prompt >= 0 and d_generation >= 0:  # not a restarted daemon
                per_step = (d_prompt / d_steps, d_generation / d_steps) if d_steps else (0.0, 0.0)
                per_s = (d_prompt / d_time, d_generation / d_time) if d_time > 0 else (0.0, 0.0)
                rates = (*per_step, *per_s)
        self._previous_totals = current
        self._speculation.add(SpecCounts.of(now, totals), snapshot.window_s)
        values = (
            now,
            queue.waiting,
            queue.running,
            queue.preempted,
            queue.preemptions_total,
            0.0 if kv is None else kv.usage,
            *rates,
        )
        for name, value in zip(SERIES, values):
            self.history[name].append(float(value))

    def _recent(self, name: str) -> tuple[list[float], list[float]]:
        """(times, values) of a series within the trend window."""
        times = list(self.history["time"])
        if not times:
            return [], []
        horizon = times[-1] - TREND_WINDOW_S
        pairs = [(t, v) for t, v in zip(times, self.history[name]) if t >= horizon]
        return [t for t, _ in pairs], [v for _, v in pairs]

    def _queue_view(self, snapshot: StatsSnapshot) -> QueueView:
        queue = read_queue(snapshot)
        grammar = snapshot.grammar
        if grammar is not None and grammar.num_requests == 0:
            grammar = None  # no constrained request yet: keep the line off the screen
        times, waiting = self._recent("waiting")
        _, preemptions = self._recent("preemptions_total")
        return QueueView(
            waiting=queue.waiting,
            running=queue.running,
            preempted=queue.preempted,
            preemptions_total=queue.preemptions_total,
            waiting_history=tuple(self.history["waiting"]),
            running_history=tuple(self.history["running"]),
            preempted_history=tuple(self.history["preempted"]),
            waiting_growth_per_s=slope(times, waiting),
            recent_preemptions=int(max(0.0, preemptions[-1] - preemptions[0]))
            if preemptions
            else 0,
            waiting_for_grammar=None if grammar is None else grammar.num_waiting,
        )

    def _step_view(self, snapshot: StatsSnapshot) -> StepView:
        step, throughput = snapshot.step, snapshot.throughput
        return StepView(
            prompt_tokens_per_step=throughput.prompt_tokens_per_step,
            generation_tokens_per_step=throughput.generation_tokens_per_step,
            prompt_per_step_history=tuple(self.history["prompt_per_step"]),
            generation_per_step_history=tuple(self.history["generation_per_step"]),
            steps_per_s=throughput.steps_per_s,
            step_mean_s=step.time.mean,
            step_p99_s=step.time.p99,
            phase_ms={
                "schedule": step.schedule_ms,
                "grammar": step.grammar_ms,
                "prepare": step.prepare_ms,
                "forward": step.forward_ms,
                "sample": step.sample_ms,
                "idle_gap": step.idle_gap_ms,
            },
            prefill_time_share=step.prefill_time_share,
            grammar=read_grammar(snapshot),
        )

    def _throughput_view(self, snapshot: StatsSnapshot) -> ThroughputView:
        throughput, totals = snapshot.throughput, snapshot.totals
        view = ThroughputView(
            prompt_tokens_per_s=throughput.prompt_tokens_per_s,
            generation_tokens_per_s=throughput.generation_tokens_per_s,
            requests_per_s=throughput.requests_per_s,
            prompt_history=tuple(self.history["prompt_per_s"]),
            generation_history=tuple(self.history["generation_per_s"]),
            total_prompt_tokens=totals.prompt_tokens,
            total_generation_tokens=totals.generation_tokens,
            is_speculating=totals.spec_drafts > 0,
        )
        window = self._speculation.window()
        if window is None:
            return view
        return dataclasses.replace(
            view,
            spec_window_s=window.span_s,
            spec_acceptance_rate=window.acceptance_rate,
            spec_mean_acceptance_length=window.mean_acceptance_length,
            spec_tokens_per_step=window.tokens_per_decode_step,
        )
