"""Bottleneck hints: the rules of llmd.tui.top.hints that fire on the current view."""

from __future__ import annotations

from rich.text import Text

from llmd.tui.top.panels.base import Panel, join_lines
from llmd.tui.top.view import Hint, TopView


class HintsPanel(Panel):
    """One line per hint (wrapped when there is room), or a note that none applies."""

    TITLE = "Hints"

    def draw(self, view: TopView, width: int, height: int) -> Text:
        if not view.hints:
            return Text("no known bottleneck showing", style="dim")
        lines = [hint_line(hint) for hint in view.hints]
        wrapped = [part for line in lines for part in line.wrap(self.app.console, width)]
        if len(wrapped) <= height:
            return join_lines(list(wrapped), height)
        shown = lines[:height]
        num_hidden = len(lines) - len(shown)
        for line in shown:
            line.truncate(width, overflow="ellipsis")
        if num_hidden:
            suffix = f" (+{num_hidden} more)"
            shown[-1].truncate(max(1, width - len(suffix)), overflow="ellipsis")
            shown[-1].append(suffix, style="bold")
        return join_lines(shown, height)


def hint_line(hint: Hint) -> Text:
    """A hint with its severity marker, coloured."""
    style = "yellow" if hint.severity == "warning" else "cyan"
    line = Text("▲ " if hint.severity == "warning" else "ℹ ", style=f"bold {style}")
    line.append(hint.message, style=style)
    return line
