"""The request table: live requests (then recently finished ones), sortable and selectable."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text

from llmd.protocol.engine_sections import RequestRow
from llmd.tui.formatting import MISSING, bar, fmt_percent, fmt_seconds, fmt_uptime
from llmd.tui.top.panels.base import Panel, join_lines
from llmd.tui.top.view import TopView

STATE_STYLES = {"running": "green", "waiting": "yellow", "preempted": "red", "finished": "dim"}


def progress_fraction(row: RequestRow) -> float:
    """Prefill progress while the prompt is being computed, then decode progress."""
    return row.prefill_progress if row.prefill_progress < 1.0 else row.decode_progress


def progress_text(row: RequestRow, width: int) -> str:
    """'prefill 40%' / 'decode 62%' as a small bar when there is room, else a percentage."""
    fraction = progress_fraction(row)
    phase = "P" if row.prefill_progress < 1.0 else "D"
    percent = fmt_percent(fraction)
    if width < 10:
        return f"{phase}{percent}"
    return f"{phase}{bar((fraction,), '█', width - 5, '░')}{percent:>4}"


def state_text(row: RequestRow) -> str:
    """The state, with the finish reason for finished requests."""
    if row.is_finished:
        return f"✓{row.finish_reason or ''}"
    return row.state


def ttft_text(row: RequestRow) -> str:
    """Time to first token, or '-' before it."""
    return MISSING if row.ttft_s is None else fmt_seconds(row.ttft_s)


def age_text(seconds: float) -> str:
    """Ages under a minute with decimals, longer ones as 3m07s."""
    return fmt_seconds(seconds) if seconds < 60 else fmt_uptime(seconds)


@dataclass(frozen=True)
class Column:
    """A table column: header, width, sort key it shows, and how a row renders in it."""

    title: str
    width: int
    sort_key: str | None
    cell: Callable[[RequestRow, int], str]
    is_optional: bool = False


COLUMNS = (
    Column("request", 10, None, lambda row, _: row.label or row.request_id),
    Column("state", 10, "state", lambda row, _: state_text(row)),
    Column("prompt", 7, "prompt", lambda row, _: str(row.num_prompt_tokens)),
    Column("gen", 9, "generated", lambda row, _: f"{row.num_generated_tokens}/{row.max_tokens}"),
    Column("progress", 18, "progress", progress_text),
    Column("age", 7, "age", lambda row, _: age_text(row.age_s)),
    Column("TTFT", 8, "ttft", lambda row, _: ttft_text(row)),
    Column("pre", 4, None, lambda row, _: str(row.num_preemptions), is_optional=True),
)  # fmt: skip


MAX_LABEL_WIDTH = 32
"""Widest the request column grows to show labels (an X-Request-Id) on a wide screen."""


def fit_columns(width: int, label_width: int = 0) -> list[Column]:
    """Columns that fit `width`: optional ones drop first, then progress narrows to a
    percentage; spare width goes first to the request column, up to `label_width` (the
    longest label shown, at most MAX_LABEL_WIDTH), then to progress."""
    columns = list(COLUMNS)
    if sum(c.width + 1 for c in columns) > width:
        columns = [c for c in columns if not c.is_optional]
    spare = width - sum(c.width + 1 for c in columns)
    if spare < 0:
        return [
            Column("prog", 6, c.sort_key, c.cell) if c.title == "progress" else c for c in columns
        ]
    first = columns[0]
    grown = max(first.width, min(label_width, MAX_LABEL_WIDTH, first.width + spare))
    columns[0] = Column(first.title, grown, first.sort_key, first.cell)
    spare -= grown - first.width
    return [
        Column(c.title, c.width + min(spare, 12), c.sort_key, c.cell)
        if c.title == "progress"
        else c
        for c in columns
    ]


STATE_ROW_LINES = 10
"""The queue/KV/prefill-decode row's natural height (its panels' lines and border): the
request table never takes it, whatever the number of rows."""
OTHER_REGIONS = ("#header", "#row-speed", "#hints", "Footer")
"""What else shares a tall screen's height with the state row and the table's row."""


def table_lines(panel: Panel, screen_height: int) -> int:
    """Content lines the request table's row may take on a tall screen: what the other
    regions (at their current heights) and the state row leave, less the row's border."""
    screen = panel.screen
    taken = sum(screen.query_one(selector).outer_size.height for selector in OTHER_REGIONS)
    return max(3, screen_height - taken - STATE_ROW_LINES - 1)


def tall_and_unzoomed(panel: Panel) -> bool:
    """Whether `panel` is laid out on the tall overview (where its row fits the table)."""
    screen = panel.screen
    return screen.has_class("-tall") and not screen.has_class("-zoomed")


def visible_range(num_rows: int, selected: int, capacity: int) -> range:
    """The rows to draw: from the top (live requests first), scrolled only as far as the
    selected row needs."""
    if num_rows <= capacity:
        return range(num_rows)
    start = min(max(0, selected - capacity + 1), num_rows - capacity)
    return range(start, start + capacity)


class RequestsPanel(Panel):
    """One line per request; the selected row is highlighted and drives the timeline."""

    TITLE = "Requests"
    FITS_CONTENT = True

    def state_of(self, view: TopView) -> object:
        return view.requests, view.num_live_requests, view.selected_request_id, view.sort_key

    def fits_content(self) -> bool:
        """On a tall screen the table takes the rows it needs and the panels above grow."""
        return tall_and_unzoomed(self)

    def needed_lines(self, view: TopView, width: int) -> int:
        """Column titles, a line per row (or the note that there is none), the footer."""
        return 2 + max(1, len(view.requests)) if view.has_snapshot else 1

    def max_lines(self, screen_height: int) -> int:
        return table_lines(self, screen_height)

    def draw(self, view: TopView, width: int, height: int) -> Text:
        label_width = max((len(row.label) for row in view.requests if row.label), default=0)
        columns = fit_columns(width, label_width)
        header = Text()
        for column in columns:
            marker = "▼" if column.sort_key == view.sort_key else ""
            title = (column.title[: column.width - len(marker)] + marker).ljust(column.width + 1)
            header.append(title, style="bold underline" if marker else "bold")
        rows = view.requests
        lines = [header]
        if not rows:
            lines.append(Text("no requests yet", style="dim"))
        selected = next(
            (i for i, row in enumerate(rows) if row.request_id == view.selected_request_id), None
        )
        if selected is None:  # the selected request left the table: show the top
            selected = 0
        capacity = max(1, height - 2)
        for index in visible_range(len(rows), selected, capacity):
            row = rows[index]
            cells = [
                column.cell(row, column.width)[: column.width].ljust(column.width + 1)
                for column in columns
            ]
            line = Text("".join(cells))
            if columns[1].title == "state":
                start = len(cells[0])
                line.stylize(STATE_STYLES.get(row.state, ""), start, start + len(cells[1]))
            if row.is_finished:
                line.stylize("dim")
            if row.request_id == view.selected_request_id:
                line.stylize("reverse")
            lines.append(line)
        num_hidden_live = view.num_live_requests - sum(
            1 for index in visible_range(len(rows), selected, capacity)
            if not rows[index].is_finished
        )  # fmt: skip
        more = f" ({num_hidden_live} not shown: 7 zooms)" if num_hidden_live > 0 else ""
        footer = f"{view.num_live_requests} live{more} · sorted by {view.sort_key} (s) · ↑↓"
        lines = lines[: max(1, height - 1)] + [Text(footer, style="dim")]
        for line in lines:
            line.truncate(width, overflow="ellipsis")
        return join_lines(lines, height)
