"""The interface every top panel shares: `show(view)` stores the state, `draw` renders it.

Panels draw from the latest TopView only, at whatever size the layout gives them, so one
panel class serves the 80x24 layout and the wide one by abbreviating instead of wrapping.
A panel renders its lines itself when its state changes and repaints only the lines that
differ from the previous draw: a full-widget refresh would make Textual re-render the
panel and every widget under the repainted region, which is most of top's CPU time.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
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
        self._strips: list[Strip] = []
        self._strips_size = Size(0, 0)
        self._line_strips: dict[tuple, Strip] = {}
        """The last render's strip of each distinct line: unchanged lines are not rendered."""
        self.num_lines_repainted = 0
        """Content lines sent to the screen since mount (tests count repaints with it)."""
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
        self.repaint()
        return True

    def repaint(self) -> None:
        """Render now at the current size and refresh only the lines that changed."""
        size = self.content_size
        if not size.width or not size.height:  # not laid out yet: render when shown
            self.refresh()
            return
        previous = self._strips if self._strips_size == size else None
        self._strips, self._strips_size = self._render_strips(size), size
        if previous is None:
            self.num_lines_repainted += size.height
            self.refresh()
            return
        changed = [y for y, (old, new) in enumerate(zip(previous, self._strips)) if old != new]
        self.num_lines_repainted += len(changed)
        for start, stop in line_runs(changed):
            self.refresh(Region(0, start, size.width, stop - start))

    def render_line(self, y: int) -> Strip:
        """Content line `y` from the last render (rendered again after a resize)."""
        size = self.content_size
        if self._strips_size != size:
            self._strips, self._strips_size = self._render_strips(size), size
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(size.width, self.visual_style.rich_style)

    def _render_strips(self, size: Size) -> list[Strip]:
        """`render()` as `size.height` strips of `size.width` cells, in the panel's colours."""
        console = self.app.console
        base = self.visual_style.rich_style
        renderable = self.render()
        if not (isinstance(renderable, Text) and renderable.no_wrap):  # Rich wraps it
            options = console.options.update(width=size.width, height=size.height)
            lines = console.render_lines(renderable, options, style=base, pad=True)
            return [Strip(line, size.width) for line in lines]
        previous, self._line_strips = self._line_strips, {}
        strips = []
        for line in renderable.split("\n", allow_blank=True)[: size.height]:
            key = (line.plain, line.style, tuple(line.spans))
            strip = previous.get(key) or line_strip(line, console, base, size.width)
            self._line_strips[key] = strip
            strips.append(strip)
        blank = Strip.blank(size.width, base)
        return strips + [blank] * (size.height - len(strips))

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


def line_strip(line: Text, console, base: Style, width: int) -> Strip:
    """One line of text as exactly `width` cells over the `base` style (cropped or padded)."""
    segments = line.render(console)
    if line.style and not line.spans:  # render() applies the text's own style only to spans
        segments = Segment.apply_style(segments, console.get_style(line.style))
    return Strip(Segment.apply_style(segments, base)).crop_extend(0, width, base)


def line_runs(line_numbers: list[int]) -> list[tuple[int, int]]:
    """Sorted line numbers as (start, stop) runs: [1, 2, 5] -> [(1, 3), (5, 6)]."""
    runs: list[tuple[int, int]] = []
    for y in line_numbers:
        if runs and runs[-1][1] == y:
            runs[-1] = (runs[-1][0], y + 1)
        else:
            runs.append((y, y + 1))
    return runs


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
