"""The interface every top panel shares: `show(view)` stores the state, `draw` renders it.

Panels draw from the latest TopView only, at whatever size the layout gives them, so one
panel class serves the 80x24 layout and the wide one by abbreviating instead of wrapping.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text
from textual.widget import Widget

from llmd.tui.top.view import TopView


class Panel(Widget):
    """A screen region of `llmd top`; subclasses implement `draw` and name what they read."""

    TITLE = ""
    IS_SLOW = False
    """A slow-moving, costly panel (windowed percentiles, the block map): it redraws at
    most once per the app's `slow_redraw_s`, off the snapshot-rate path."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.view: TopView | None = None
        self._drawn_state: object = _NOTHING
        self._drawn_at = float("-inf")
        if self.TITLE:
            self.border_title = self.TITLE

    def state_of(self, view: TopView) -> object:
        """The part of `view` this panel draws: when it is unchanged, nothing is redrawn."""
        return view

    def show(self, view: TopView, now: float = 0.0, slow_redraw_s: float = 0.0) -> bool:
        """Redraw from `view` if what this panel shows changed; True when it did.

        A slow panel drawn less than `slow_redraw_s` before `now` waits: a later call
        (the next snapshot, or the app's one-second tick) draws the newest view.
        """
        self.view = view
        state = (view.has_snapshot, self.state_of(view))
        if state == self._drawn_state:
            return False
        if self.IS_SLOW and now - self._drawn_at < slow_redraw_s:
            return False
        self._drawn_state = state
        self._drawn_at = now
        self.refresh()
        return True

    def render(self) -> RenderableType:
        if self.view is None or not self.view.has_snapshot:
            return Text("waiting for the first snapshot…", style="dim")
        size = self.content_size
        return self.draw(self.view, max(1, size.width), max(1, size.height))

    def draw(self, view: TopView, width: int, height: int) -> RenderableType:
        """The panel's content for a `width` x `height` region."""
        raise NotImplementedError


_NOTHING = object()
"""The drawn state of a panel that has not drawn yet (equal to no state)."""


def styled_runs(chars: str, style_of) -> Text:
    """`chars` with each run of equally styled characters as one span (cheap to draw)."""
    text = Text()
    start = 0
    for index in range(1, len(chars) + 1):
        if index == len(chars) or style_of(chars[index]) != style_of(chars[start]):
            text.append(chars[start:index], style=style_of(chars[start]))
            start = index
    return text


def wrapped(lines: list[Text], width: int, console) -> list[Text]:
    """Each line word-wrapped to `width` (long prose wraps instead of being cut)."""
    return [part for line in lines for part in line.wrap(console, max(1, width))]


def labeled(label: str, value: str, label_width: int, style: str = "") -> Text:
    """'label   value' with the label dimmed and padded to `label_width`."""
    line = Text(label.ljust(label_width), style="dim")
    line.append(value, style=style)
    return line


def join_lines(lines: list[Text], height: int) -> Text:
    """At most `height` lines joined by newlines."""
    text = Text("\n").join(lines[:height])
    text.no_wrap = True  # already fitted: spare Textual a second wrapping pass
    text.overflow = "crop"
    return text
