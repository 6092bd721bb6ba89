"""The fleet screen of `llmd top`: a title line, one row per daemon, and the totals row.

Columns have fixed widths and the address takes what is left (cut from the left, so the
distinguishing tail of a socket path or port stays); wide terminals add the model's name.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widget import Widget

from llmd.tui.formatting import MISSING, fmt_number, fmt_percent, fmt_seconds
from llmd.tui.top.fleet_view import CONNECTING, DOWN, UP, DaemonRow, FleetView

COLUMNS = (
    ("state", 5), ("queue", 5), ("run", 4), ("KV", 4), ("hit", 4), ("tok/s", 6),
    ("TTFT p50/p99", 12), ("TPOT p50/p99", 12),
)  # fmt: skip
"""(heading, width) of each figure column, after the address."""
MODEL_WIDTH = 18
"""The model column, shown from WIDE_COLUMNS on."""
WIDE_COLUMNS = 120
MIN_ADDRESS_WIDTH = 10
HEALTH_STYLES = {UP: "bold green", DOWN: "bold red", CONNECTING: "yellow"}


def shown_address(address: str, is_wide: bool) -> str:
    """The address as the table shows it: without `tcp://` on a narrow screen."""
    return address if is_wide else address.removeprefix("tcp://").removeprefix("ipc://")


def cut_left(text: str, width: int) -> str:
    """`text` in `width` cells, its start replaced by '…' when too long."""
    return text if len(text) <= width else "…" + text[len(text) - width + 1 :]


def figures(row: DaemonRow) -> list[str]:
    """The figure columns of `row` as text."""

    def pair(p50: float | None, p99: float | None) -> str:
        return f"{fmt_seconds(p50)}/{fmt_seconds(p99)}"

    return [
        row.health,
        fmt_number(row.waiting),
        fmt_number(row.running),
        fmt_percent(row.kv_usage),
        fmt_percent(row.prefix_hit_rate),
        fmt_number(row.decode_tokens_per_s),
        pair(row.ttft_p50_s, row.ttft_p99_s),
        pair(row.tpot_p50_s, row.tpot_p99_s),
    ]


class FleetTable(Widget):
    """Draws a FleetView; the app moves the cursor and drills into the selected daemon."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.view: FleetView | None = None

    def show(self, view: FleetView) -> None:
        """Draw `view` if it differs from the one on screen."""
        if view != self.view:
            self.view = view
            self.refresh()

    def render(self) -> Text:
        return self.draw(self.view, max(1, self.content_size.width))

    def draw(self, view: FleetView | None, width: int) -> Text:
        """The whole table at `width` columns."""
        if view is None:
            return Text("llmd top · fleet: connecting…")
        is_wide = width >= WIDE_COLUMNS
        fixed = sum(size + 1 for _, size in COLUMNS) + (MODEL_WIDTH + 1 if is_wide else 0)
        longest = max(len(shown_address(row.address, is_wide)) for row in view.rows)
        room = max(MIN_ADDRESS_WIDTH, width - fixed - 2)
        address_width = min(room, max(longest, len(view.totals.address)))
        title = Text(f"llmd top · fleet of {len(view.rows)} daemons · {view.num_up} up", "bold")
        title.append("   ⏎ full view, Esc back", style="dim")
        lines = [title, self._line("  ", "daemon", "model", [name for name, _ in COLUMNS],
                                   address_width, is_wide, style="bold underline")]  # fmt: skip
        for index, row in enumerate(view.rows):
            is_selected = index == view.selected_index
            style = "reverse" if is_selected else ("dim" if row.health == DOWN else "")
            address = shown_address(row.address, is_wide)
            line = self._line("▶ " if is_selected else "  ", address, row.model_name or MISSING,
                              figures(row), address_width, is_wide, style=style)  # fmt: skip
            lines.append(line)
        totals = view.totals
        lines.append(self._line("  ", totals.address, "", ["", *figures(totals)[1:]],
                                address_width, is_wide, style="bold"))  # fmt: skip
        down = [row for row in view.rows if row.health == DOWN and row.reason]
        for row in down:
            reason = f"  {shown_address(row.address, is_wide)} down: {row.reason}"
            lines.append(Text(reason[:width], style="red"))
        text = Text("\n").join(line[:width] if line.cell_len > width else line for line in lines)
        text.no_wrap = True
        text.overflow = "crop"
        return text

    def _line(self, lead: str, address: str, model_name: str, cells: list[str],
              address_width: int, is_wide: bool, style: str) -> Text:  # fmt: skip
        line = Text(lead, style=style)
        line.append(cut_left(address, address_width).ljust(address_width), style=style)
        if is_wide:
            line.append(" " + cut_left(model_name, MODEL_WIDTH).ljust(MODEL_WIDTH),
                        style=style)  # fmt: skip
        for (heading, size), cell in zip(COLUMNS, cells):
            cell_style = HEALTH_STYLES.get(cell, style) if heading == "state" else style
            if heading == "state" and style in ("reverse", "dim"):
                cell_style = f"{cell_style} {style}"
            cell = cut_left(cell, size) if heading == "state" else cell
            line.append(" " + (cell.ljust(size) if heading == "state" else cell.rjust(size)),
                        style=cell_style)  # fmt: skip
        return line
