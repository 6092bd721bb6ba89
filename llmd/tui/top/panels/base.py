"""The interface every top panel shares: `show(view)` stores the state, `draw` renders it.

Panels draw from the latest TopView only, at whatever size the layout gives them, so one
panel class serves the 80x24 layout and the wide one by abbreviating instead of wrapping.
A panel renders its lines itself when its state changes and repaints only the lines that
differ from the previous draw: a full-widget refresh would make Textual re-render the
panel and every widget under the repainted region, which is most of top's CPU time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console, RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.text import Span, Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from llmd.tui.top.view import TopView


class Panel(Widget):
    """A screen region of `llmd top`; subclasses implement `draw` and name what they read."""

    TITLE = ""
    FITS_CONTENT = False
    """The panel's height follows its content (its CSS height is auto): see `fits_content`."""
    IS_SLOW = False
    """A slow-moving, costly panel (windowed percentiles, the block map): it redraws at
    most once per the app's `slow_redraw_s`, off the snapshot-rate path."""
    SECTION = ""
    """The TopView field the panel draws (its state, see `state_of`); "" for the whole view."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.view: TopView | None = None
        self._drawn_state: object = _NOTHING
        self._drawn_at = float("-inf")
        self._strips: list[Strip] = []
        self._strips_key: tuple[Size, Style] | None = None
        """(content size, base style) the strips were rendered for: a resize or a theme
        change renders them again."""
        self._line_strips_key: tuple[int, Style] | None = None
        self._line_strips: dict[tuple[str, str | Style, tuple[Span, ...]], Strip] = {}
        """The last render's strip of each distinct line: unchanged lines are not rendered."""
        self.num_lines_repainted = 0
        """Content lines sent to the screen since mount (tests count repaints with it)."""
        self._allotted: tuple[tuple[int, int], int] | None = None
        """((content width, screen height), lines) the layout last gave a fitted panel."""
        self._shrink_since: float | None = None
        """When a fitted panel first needed fewer lines than allotted (None: it needs them)."""
        self._needed: tuple[object, int] | None = None
        """(state, width) and the lines it needs, so a tick does not draw it again."""
        if self.TITLE:
            self.border_title = self.TITLE

    def state_of(self, view: TopView) -> object:
        """The part of `view` this panel draws: when it is unchanged, nothing is redrawn."""
        return getattr(view, self.SECTION) if self.SECTION else view

    def show(self, view: TopView, now: float = 0.0, slow_redraw_s: float = 0.0) -> bool:
        """Redraw from `view` if what this panel shows changed; True when it did.

        A slow panel drawn less than `slow_redraw_s` before `now` waits: a later call
        (the next snapshot, or the app's one-second tick) draws the newest view.
        """
        self.view = view
        self._fit_height(now)
        state = (view.has_snapshot, self.state_of(view))
        if state == self._drawn_state:
            return False
        if self.IS_SLOW and now - self._drawn_at < slow_redraw_s - SLOW_SLACK_S:
            return False  # (the slack: snapshots a second apart are never a tick too early)
        self._drawn_state = state
        self._drawn_at = now
        self.repaint()
        return True

    # ------------------------------------------------------------------ height

    def fits_content(self) -> bool:
        """Whether the height follows the content now (subclasses: only on some screens)."""
        return self.FITS_CONTENT

    def needed_lines(self, view: TopView, width: int) -> int:
        """Lines the content of `view` needs at `width`, for a panel that fits its content."""
        if not view.has_snapshot:
            return 1
        return len(self.draw(view, width, MAX_LINES).plain.split("\n"))

    def max_lines(self, screen_height: int) -> int:
        """The most lines a fitted panel may take on a screen `screen_height` lines tall
        (read again at every snapshot: it may depend on the other panels' heights)."""
        return MAX_LINES

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """The lines allotted (set again when the width or the screen height changes)."""
        key = (width, viewport.height)
        if self._allotted is None or self._allotted[0] != key:
            lines = self.needed_lines(self.view or TopView(), width)
            self._allotted = (key, max(1, min(lines, self.max_lines(viewport.height))))
            self._shrink_since = None
        return self._allotted[1]

    def _fit_height(self, now: float) -> None:
        """Grow at once to fit new content; give lines back only after fewer were needed for
        SHRINK_AFTER_S (each height change lays out and repaints the whole screen), or at
        once when the room the panel may take shrank."""
        if self._allotted is None or self.view is None or not self.fits_content():
            return
        (width, screen_height), allotted = self._allotted
        key = (self.view.has_snapshot, self.state_of(self.view), width)
        if self._needed is None or self._needed[0] != key:
            self._needed = (key, self.needed_lines(self.view, width))
        room = self.max_lines(screen_height)
        needed = max(1, min(self._needed[1], room))
        if needed >= allotted:
            self._shrink_since = None
        elif self._shrink_since is None:
            self._shrink_since = now
        shrink_since = self._shrink_since  # set above whenever needed < allotted
        is_shrink_due = (
            needed < allotted
            and shrink_since is not None
            and (allotted > room or now - shrink_since >= SHRINK_AFTER_S)
        )
        if needed > allotted or is_shrink_due:
            self._allotted = ((width, screen_height), needed)
            self._shrink_since = None
            self.refresh(layout=True)

    # ------------------------------------------------------------------ lines

    def repaint(self) -> None:
        """Render now at the current size and refresh only the lines that changed."""
        size = self.content_size
        if not size.width or not size.height:  # hidden or not laid out: render when shown
            self._strips_key = None  # (shown again at its old size, it must not reuse them)
            self.refresh()
            return
        key = (size, self.visual_style.rich_style)
        previous = self._strips if self._strips_key == key else None
        self._strips, self._strips_key = self._render_strips(size), key
        if previous is None:
            self.num_lines_repainted += size.height
            self.refresh()
            return
        changed = [y for y, (old, new) in enumerate(zip(previous, self._strips)) if old != new]
        self.num_lines_repainted += len(changed)
        for start, stop in line_runs(changed):
            self.refresh(Region(0, start, size.width, stop - start))

    def render_line(self, y: int) -> Strip:
        """Content line `y` from the last render (rendered again after a resize or a new
        theme)."""
        size = self.content_size
        key = (size, self.visual_style.rich_style)
        if self._strips_key != key:
            self._strips, self._strips_key = self._render_strips(size), key
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
        previous = self._line_strips if self._line_strips_key == (size.width, base) else {}
        self._line_strips, self._line_strips_key = {}, (size.width, base)
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

    def draw(self, view: TopView, width: int, height: int) -> Text:
        """The panel's content for a `width` x `height` region."""
        raise NotImplementedError


SLOW_SLACK_S = 0.1
"""A slow panel due within this long draws now, with the snapshot being drawn, rather than
on its own repaint a moment later."""
MAX_LINES = 1000
"""More lines than any screen has: a panel drawn this tall shows all its content."""
SHRINK_AFTER_S = 10.0
"""How long a fitted panel must need fewer lines before it gives them back: content that
comes and goes every few snapshots (hints, table rows) would otherwise relayout each time."""

_NOTHING = object()
"""The drawn state of a panel that has not drawn yet (equal to no state)."""


def line_strip(line: Text, console: Console, base: Style, width: int) -> Strip:
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


def styled_runs(chars: str, style_of: Callable[[str], str | Style]) -> Text:
    """`chars` with each run of equally styled characters as one span (cheap to draw)."""
    text = Text()
    start = 0
    for index in range(1, len(chars) + 1):
        if index == len(chars) or style_of(chars[index]) != style_of(chars[start]):
            text.append(chars[start:index], style=style_of(chars[start]))
            start = index
    return text


def wrapped(lines: list[Text], width: int, console: Console) -> list[Text]:
    """Each line word-wrapped to `width` (long prose wraps instead of being cut)."""
    return [part for line in lines for part in line.wrap(console, max(1, width))]


def join_lines(lines: list[Text], height: int) -> Text:
    """At most `height` lines joined by newlines."""
    text = Text("\n").join(lines[:height])
    text.no_wrap = True  # already fitted: spare Textual a second wrapping pass
    text.overflow = "crop"
    return text
