"""Bottleneck hints: the rules of llmd.tui.top.hints that fire on the current view."""

from __future__ import annotations

from rich.text import Text

from llmd.tui.top.panels.base import Panel, join_lines, wrapped
from llmd.tui.top.view import Hint, TopView

NO_HINT = "no known bottleneck showing"


class HintsPanel(Panel):
    """Every hint, word-wrapped and never cut; the panel grows to the lines they need."""

    TITLE = "Hints"
    FITS_CONTENT = True

    def state_of(self, view: TopView) -> object:
        return view.hints

    def groups(self, view: TopView | None, width: int) -> list[list[Text]]:
        """Each hint's wrapped lines (or the note that none fires); wrapping is cached."""
        key = (None if view is None else (view.has_snapshot, view.hints), width)
        cached = getattr(self, "_groups_cache", None)
        if cached is not None and cached[0] == key:
            return [[line.copy() for line in group] for group in cached[1]]
        groups = self._wrap_groups(view, width)
        self._groups_cache = (key, groups)
        return [[line.copy() for line in group] for group in groups]

    def _wrap_groups(self, view: TopView | None, width: int) -> list[list[Text]]:
        if view is None or not view.has_snapshot:
            return [[Text("waiting for the first snapshot…", style="dim")]]
        if not view.hints:
            return [[Text(NO_HINT, style="dim")]]
        return [wrapped([hint_line(hint)], width, self.app.console) for hint in view.hints]

    def needed_lines(self, view: TopView, width: int) -> int:
        """Lines every hint of `view` needs, wrapped to `width`."""
        return sum(len(group) for group in self.groups(view, width))

    def draw(self, view: TopView, width: int, height: int) -> Text:
        groups = self.groups(view, width)
        if sum(len(group) for group in groups) <= height:
            return join_lines([line for group in groups for line in group], height)
        lines: list[Text] = []  # whole hints only, and a line that says what did not fit
        for index, group in enumerate(groups):
            if len(lines) + len(group) > height - 1:
                num_more = len(groups) - index
                number = self.border_title.split(" ", 1)[0] if self.border_title else "9"
                note = f"▲ +{num_more} more hint{'s' if num_more > 1 else ''}: press {number}"
                lines.append(Text(note, style="bold yellow"))
                break
            lines.extend(group)
        return join_lines(lines, height)


def hint_line(hint: Hint) -> Text:
    """A hint with its severity marker, coloured."""
    style = "yellow" if hint.severity == "warning" else "cyan"
    line = Text("▲ " if hint.severity == "warning" else "ℹ ", style=f"bold {style}")
    line.append(hint.message, style=style)
    return line
