"""`llmd top`: the panels, the key bindings, and the handlers that feed snapshots to the model.

The feed worker only fills a one-snapshot slot and posts messages; the handlers here move
snapshots into the headless TopModel and redraw every panel from its single TopView.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Footer

from llmd.tui.top.events import FeedLive, FeedLost, SnapshotReady
from llmd.tui.top.feed import SnapshotFeed
from llmd.tui.top.model import TopModel
from llmd.tui.top.panels.base import Panel
from llmd.tui.top.panels.efficiency import EfficiencyPanel
from llmd.tui.top.panels.header import HeaderPanel
from llmd.tui.top.panels.hints import HintsPanel
from llmd.tui.top.panels.kv_cache import KVCachePanel
from llmd.tui.top.panels.latency import LatencyPanel
from llmd.tui.top.panels.queue import QueuePanel
from llmd.tui.top.panels.requests import RequestsPanel
from llmd.tui.top.panels.steps import StepsPanel
from llmd.tui.top.panels.throughput import ThroughputPanel
from llmd.tui.top.panels.timeline import TimelinePanel

DEFAULT_INTERVAL_S = 0.25
CLOCK_TICK_S = 1.0
"""How often the screen catches up without a snapshot (link state, waiting slow panels);
a tick redraws only when no snapshot did for this long, so it never adds a repaint."""
TICK_SLACK_S = 0.1
"""Timer jitter allowed when deciding whether a tick or a slow panel is due."""
SLOW_REDRAW_S = 1.0
"""Slow panels (latency window, efficiency, block map, timeline) redraw at most this often."""
WIDE_COLUMNS = 120
"""Narrower terminals hide the panels of class `optional` (top.tcss's -narrow rules)."""


class TopApp(App[None]):
    """A live monitor of one llmd daemon."""

    CSS_PATH = "top.tcss"
    TITLE = "llmd top"
    # textual's App annotates these `ClassVar[...] | None`, which mypy reads as instance
    # variables: it then refuses class variables here, though they are what textual reads.
    HORIZONTAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [  # type: ignore[misc]
        (0, "-narrow"),
        (WIDE_COLUMNS, "-wide"),
    ]
    VERTICAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [(0, "-short"), (36, "-tall")]  # type: ignore[misc]
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("p", "pause", "Pause"),
        Binding("s", "sort", "Sort"),
        Binding("1", "zoom_toggle(1)", "Zoom", key_display="1-9"),
        *(Binding(str(number), f"zoom_toggle({number})", show=False) for number in range(2, 10)),
        Binding("z", "zoom_next", "Next zoom", show=False),
        Binding("escape,0", "zoom(0)", "Unzoom", show=False),
        Binding("up,k", "select(-1)", "Select", key_display="↑↓"),
        Binding("down,j", "select(1)", "Select", show=False),
        Binding("pageup", "select(-10)", show=False),
        Binding("pagedown", "select(10)", show=False),
    ]

    def __init__(
        self,
        client_factory: Callable[[], Any],
        address: str,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        slow_redraw_s: float = SLOW_REDRAW_S,
    ) -> None:
        super().__init__()
        self.address = address
        self.slow_redraw_s = slow_redraw_s
        self.model = TopModel(clock=clock)
        self.zoomed_number = 0
        """The panel shown on the whole screen (1-9), or 0 for the overview."""
        self.last_redraw_at = float("-inf")
        """time.monotonic() of the last redraw."""
        self.feed = SnapshotFeed(client_factory, interval_s, self.post_message)

    def compose(self) -> ComposeResult:
        yield HeaderPanel(self.address, id="header")
        with Horizontal(id="row-state", classes="row"):
            yield QueuePanel(id="queue")
            yield KVCachePanel(id="kv")
            yield StepsPanel(id="steps", classes="optional")
        with Horizontal(id="row-speed", classes="row"):
            yield ThroughputPanel(id="throughput")
            yield LatencyPanel(id="latency")
            yield EfficiencyPanel(id="efficiency", classes="optional")
        with Horizontal(id="row-requests", classes="row"):
            yield RequestsPanel(id="requests")
            yield TimelinePanel(id="timeline", classes="optional")
        yield HintsPanel(id="hints")
        yield Footer()

    def on_mount(self) -> None:
        for number, panel in enumerate(self.zoomable_panels(), start=1):
            panel.border_title = f"{number} {panel.TITLE}"
        # The App's own Resize handler misses resizes (Textual stops the event and forwards
        # it to the screen later); every resize lays the screen out again, so note there.
        self.screen.screen_layout_refresh_signal.subscribe(
            self, lambda _screen: self._note_hidden_panels()
        )
        self.redraw()
        self.start_feeds()
        self.set_interval(CLOCK_TICK_S, self._on_clock_tick)

    def start_feeds(self) -> None:
        """Run the snapshot feed in a worker (the fleet app runs one per daemon)."""
        self.run_worker(self.feed.run(), group="feed", exclusive=True)

    def redraw(self, is_urgent: bool = False) -> None:
        """Give every panel the model's current view; only the changed ones redraw.

        Slow panels wait up to `slow_redraw_s`, unless the user just acted (`is_urgent`).
        """
        view = self.model.view()
        now = time.monotonic()
        self.last_redraw_at = now
        slow_redraw_s = 0.0 if is_urgent else self.slow_redraw_s
        for panel in self.query(Panel):
            panel.show(view, now, slow_redraw_s)

    def zoomable_panels(self) -> list[Panel]:
        """The panels in key order (1-9): all but the header."""
        return [panel for panel in self.query(Panel) if panel.id != "header"]

    def _note_hidden_panels(self) -> None:
        """Name the panels this size hides (and their keys) in the hints panel's title.

        Decided from the terminal's width, not the panels' computed styles: those follow a
        resize only after the screen's breakpoint classes and CSS catch up, which left a
        stale title behind.
        """
        panels = self.zoomable_panels()
        is_narrow = self.size.width < WIDE_COLUMNS
        hidden = [
            (number, panel.TITLE)
            for number, panel in enumerate(panels, start=1)
            if is_narrow and panel.has_class("optional") and not self.screen.has_class("-zoomed")
        ]
        hints = self.query_one(HintsPanel)
        title = f"{panels.index(hints) + 1} {hints.TITLE}"
        if hidden:
            names = ", ".join(f"{number} {name}" for number, name in hidden)
            keys = "/".join(str(number) for number, _ in hidden)
            title += f" · hidden: {names} (press {keys})"
        if hints.border_title != title:
            hints.border_title = title

    # ------------------------------------------------------------------ zoom

    def action_zoom_toggle(self, number: int) -> None:
        """Zoom panel `number`; its key again (or Esc) goes back to the overview."""
        self.action_zoom(0 if number == self.zoomed_number else number)

    def action_zoom_next(self) -> None:
        """Zoom the next panel (z), after the last one back to the overview."""
        self.action_zoom((self.zoomed_number + 1) % (len(self.zoomable_panels()) + 1))

    def action_zoom(self, number: int) -> None:
        """Show panel `number` (1-9) on the whole screen; 0 shows them all again."""
        panels = self.zoomable_panels()
        if not 0 <= number <= len(panels):
            return
        self.zoomed_number = number
        self.screen.set_class(number > 0, "-zoomed")
        for index, panel in enumerate(panels, start=1):
            panel.set_class(index == number, "zoomed")
        for row in self.query(".row"):
            row.set_class(any(index == number for index, panel in enumerate(panels, start=1)
                              if panel.parent is row), "zoom-row")  # fmt: skip
        self._note_hidden_panels()

    def _on_clock_tick(self) -> None:
        if time.monotonic() - self.last_redraw_at >= CLOCK_TICK_S - TICK_SLACK_S:
            self.redraw()

    # ------------------------------------------------------------------ feed events

    def on_snapshot_ready(self, _: SnapshotReady) -> None:
        if self.model.is_paused:
            return  # the slot keeps the newest snapshot until the user resumes
        self._take_snapshot()

    def on_feed_live(self, _: FeedLive) -> None:
        self.model.set_live()
        self.redraw()

    def on_feed_lost(self, event: FeedLost) -> None:
        self.model.set_lost(event.message, event.retry_in_s, event.num_attempts)
        self.redraw()

    def _take_snapshot(self) -> None:
        snapshot = self.feed.slot.take()
        if snapshot is None:
            return
        self.model.apply(snapshot)
        self.feed.timeline_request_id = self.model.selected_request_id
        self.redraw()

    # ------------------------------------------------------------------ actions

    def action_pause(self) -> None:
        """Freeze the screen, or resume with the newest snapshot."""
        self.model.toggle_pause()
        if not self.model.is_paused:
            self._take_snapshot()
        self.redraw(is_urgent=True)

    def action_sort(self) -> None:
        """Sort the request table by the next column."""
        self.model.cycle_sort()
        self.redraw(is_urgent=True)

    def action_select(self, delta: int) -> None:
        """Move the selection; the feed asks for the new request's timeline."""
        self.model.move_selection(delta)
        self.feed.timeline_request_id = self.model.selected_request_id
        self.redraw(is_urgent=True)


create_top_app = TopApp
"""The top app; the CLI passes a factory of AsyncClients, tests one of fakes (the name the
CLI and the tests import, so the constructor's parameters are listed once)."""
