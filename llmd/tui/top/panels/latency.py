"""Latency percentiles (TTFT, TPOT, ITL, e2e, queue) and goodput against the SLOs."""

from __future__ import annotations

from rich.text import Text

from llmd.tui.formatting import MISSING, fmt_number, fmt_percent, fmt_seconds
from llmd.tui.top.panels.base import Panel, join_lines, wrapped
from llmd.tui.top.view import LatencyView, TopView

ROWS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "e2e"), ("queue", "queue"))


def goodput_text(latency: LatencyView) -> Text:
    """'goodput 3.7 req/s, 98% within TTFT≤200ms TPOT≤50ms' (or that no SLO is set)."""
    slos = []
    if latency.slo_ttft_ms is not None:
        slos.append(f"TTFT≤{latency.slo_ttft_ms:g}ms")
    if latency.slo_tpot_ms is not None:
        slos.append(f"TPOT≤{latency.slo_tpot_ms:g}ms")
    if not slos:
        return Text(
            f"goodput {fmt_number(latency.goodput_per_s)} req/s (set an SLO: --slo-ttft-ms)",
            style="dim",
        )
    fraction = latency.goodput_fraction
    if fraction is None or fraction >= 0.9:
        style = "green"
    else:
        style = "yellow" if fraction >= 0.5 else "red"
    return Text(
        f"goodput {fmt_number(latency.goodput_per_s)} req/s, {fmt_percent(fraction)} "
        f"({latency.num_good}/{latency.num_completed}) within {' '.join(slos)}",
        style=style,
    )


class LatencyPanel(Panel):
    """A p50/p90/p99 table over the daemon's metrics window, then goodput."""

    TITLE = "Latency"
    SECTION = "latency"
    IS_SLOW = True

    def draw(self, view: TopView, width: int, height: int) -> Text:
        latency = view.latency
        is_wide = width >= 34
        column = 8 if is_wide else 7
        window = "" if latency.window_s is None or not is_wide else f" ({latency.window_s:g}s)"
        header = Text("".ljust(6) + "".join(q.rjust(column) for q in ("p50", "p90", "p99")))
        header.append(window, style="dim")
        header.stylize("bold")
        lines = [header]
        goodput = wrapped([goodput_text(latency)], width, self.app.console)
        for key, label in ROWS[: max(1, height - 1 - len(goodput))]:
            values = latency.percentiles.get(key, (None, None, None))
            line = Text(label.ljust(6), style="dim")
            for value in values:
                shown = MISSING if value is None else fmt_seconds(value)
                line.append(shown.rjust(column))
            lines.append(line)
        for line in lines:
            line.truncate(width, overflow="ellipsis")
        return join_lines(lines + goodput, height)
