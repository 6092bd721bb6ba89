"""Queue lengths now and their recent history: waiting, running, preempted.

With structured outputs it also counts the requests waiting for their grammar to compile,
which are in no scheduler queue yet.
"""

from __future__ import annotations

from rich.text import Text

from llmd.tui.formatting import tall_sparkline
from llmd.tui.top.panels.base import Panel, join_lines
from llmd.tui.top.view import TopView

STYLES = {"waiting": "yellow", "running": "green", "preempted": "red"}
SHORT_NAMES = {"waiting": "wait", "running": "run", "preempted": "pre"}


class QueuePanel(Panel):
    """Waiting, running and preempted counts with sparklines on a shared scale (several
    lines tall when the panel has the room)."""

    TITLE = "Queue"
    SECTION = "queue"

    def draw(self, view: TopView, width: int, height: int) -> Text:
        queue = view.queue
        series = {
            "waiting": (queue.waiting, queue.waiting_history),
            "running": (queue.running, queue.running_history),
            "preempted": (queue.preempted, queue.preempted_history),
        }
        ceiling = max([1.0, *(max(h, default=0.0) for _, h in series.values())])
        label_width = 10 if width >= 30 else 5
        spark_width = max(0, width - label_width - 6)
        growth = queue.waiting_growth_per_s
        waiting_for_grammar = queue.waiting_for_grammar
        num_notes = (1 if growth is None else 2) + (waiting_for_grammar is not None)
        is_short = waiting_for_grammar is not None and height < len(series) + num_notes
        if is_short:  # the grammar count joins the growth line instead of being cut off
            num_notes -= 1
        rows = max(1, (height - num_notes) // len(series))  # a tall panel: taller sparklines
        lines = []
        for name, (count, history) in series.items():
            chart = tall_sparkline(history, spark_width, rows, ceiling)
            lines += [Text(" " * (label_width + 6) + row, style=STYLES[name]) for row in chart[:-1]]
            label = name if label_width >= 10 else SHORT_NAMES[name]
            line = Text(label.ljust(label_width), style="dim")
            line.append(f"{count:>5} ", style=f"bold {STYLES[name]}")
            line.append(chart[-1], style=STYLES[name])
            lines.append(line)
        is_wide = width >= 32
        if growth is not None and is_short:
            lines.append(Text(f"wait {growth:+.1f}/s · grammar {waiting_for_grammar}", style="dim"))
        elif growth is not None:
            label = "waiting" if is_wide else "wait"
            lines.append(Text(f"{label} {growth:+.1f}/s (last 10s)", style="dim"))
        total, recent = queue.preemptions_total, queue.recent_preemptions
        preemptions = (
            f"preemptions {total} total, {recent} recent"
            if is_wide
            else f"preempt {total} ({recent} new)"
        )
        lines.append(Text(preemptions, style="dim"))
        if waiting_for_grammar is not None and not is_short:
            label = "waiting for grammar" if is_wide else "grammar"
            lines.append(Text(f"{label} {waiting_for_grammar}", style="dim"))
        for line in lines:
            line.truncate(width, overflow="ellipsis")
        return join_lines(lines, height)
