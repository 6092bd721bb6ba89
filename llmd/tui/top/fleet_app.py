"""`llmd top` for a fleet: one feed and one TopModel per daemon, a summary table of them all,
and Enter to see one daemon in the full single-daemon view (Esc returns).

It is the single-daemon app with more feeds: each feed posts its events tagged with its
daemon, and the panels are pointed at the drilled daemon's model. A daemon whose snapshots
stop is marked down once it has been silent `down_after_s`, without waiting for its client's
timeout, and each feed is its own coroutine, so a slow daemon delays no other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message

from llmd.tui.top.app import DEFAULT_INTERVAL_S, SLOW_REDRAW_S, TopApp
from llmd.tui.top.events import FeedLive, FeedLost, SnapshotReady
from llmd.tui.top.feed import SnapshotFeed
from llmd.tui.top.fleet_table import FleetTable
from llmd.tui.top.fleet_view import UP, FleetView, daemon_row, fleet_totals
from llmd.tui.top.model import TopModel
from llmd.tui.top.panels.header import HeaderPanel

FLEET_TICK_S = 0.25
"""How often the table checks for silent daemons (a down mark is at most this late)."""
DOWN_AFTER_INTERVALS = 4
"""Missed snapshot intervals after which a daemon is marked down..."""
MIN_DOWN_AFTER_S = 1.0
"""...but never sooner than this (a daemon is busy a moment, not gone)."""


FLEET_CSS = """
#fleet { display: none; height: 1fr; padding: 0 1; }
Screen.-fleet #fleet { display: block; }
Screen.-fleet #header { display: none; }
Screen.-fleet .row { display: none; }
Screen.-fleet #hints { display: none; }
"""
"""Added to top.tcss: the fleet table fills the screen until Enter drills into a daemon."""


class DaemonEvent(Message):
    """A feed event (SnapshotReady, FeedLive, FeedLost) of the daemon at `daemon_index`."""

    def __init__(self, daemon_index: int, event: Message) -> None:
        super().__init__()
        self.daemon_index = daemon_index
        self.event = event


class FleetApp(TopApp):
    """A live monitor of several llmd daemons."""

    CSS = FLEET_CSS
    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "drill", "Full view")]

    def __init__(
        self,
        client_factories: Sequence[Callable[[], Any]],
        addresses: Sequence[str],
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        slow_redraw_s: float = SLOW_REDRAW_S,
        down_after_s: float | None = None,
    ) -> None:
        super().__init__(client_factories[0], addresses[0], interval_s, clock, slow_redraw_s)
        self.addresses = list(addresses)
        self.clock = clock
        self.models = [self.model, *(TopModel(clock=clock) for _ in addresses[1:])]
        self.feeds = [
            SnapshotFeed(factory, interval_s, self._poster(index))
            for index, factory in enumerate(client_factories)
        ]
        self.feed = self.feeds[0]
        self.last_snapshot_at: list[float | None] = [None] * len(addresses)
        """clock() when each daemon's latest snapshot arrived."""
        self.selected_index = 0
        self.drilled_index: int | None = None
        """The daemon shown in the full view, None while the fleet table shows."""
        self.down_after_s = down_after_s or max(MIN_DOWN_AFTER_S, DOWN_AFTER_INTERVALS * interval_s)

    def compose(self) -> ComposeResult:
        yield from super().compose()
        yield FleetTable(id="fleet")

    def on_mount(self) -> None:
        self.screen.add_class("-fleet")
        self.show_fleet()
        self.set_interval(FLEET_TICK_S, self.show_fleet)

    def start_feeds(self) -> None:
        """One worker per daemon, so a slow or silent daemon holds up no other."""
        for index, feed in enumerate(self.feeds):
            self.run_worker(feed.run(), group=f"feed-{index}", exclusive=True)

    def _poster(self, daemon_index: int) -> Callable[[Message], Any]:
        return lambda event: self.post_message(DaemonEvent(daemon_index, event))

    # ------------------------------------------------------------------ fleet table

    def fleet_view(self) -> FleetView:
        """The table's rows now: each daemon's health and figures, then the totals."""
        now = self.clock()
        rows = [
            daemon_row(
                address,
                model,
                None if arrived_at is None else now - arrived_at,
                self.down_after_s,
            )
            for address, model, arrived_at in zip(
                self.addresses, self.models, self.last_snapshot_at
            )
        ]
        return FleetView(
            rows=tuple(rows),
            totals=fleet_totals(rows, self.models),
            num_up=sum(row.health == UP for row in rows),
            selected_index=self.selected_index,
        )

    def show_fleet(self) -> None:
        """Redraw the fleet table (only when its rows changed)."""
        tables = self.query(FleetTable)
        if not tables:  # the app is closing: a timer's last tick after its widgets went
            return
        tables.first().show(self.fleet_view())

    def on_daemon_event(self, message: DaemonEvent) -> None:
        """Apply one daemon's feed event to its model; redraw its full view if shown."""
        index, event = message.daemon_index, message.event
        model = self.models[index]
        if isinstance(event, SnapshotReady):
            self.last_snapshot_at[index] = self.clock()
            snapshot = None if model.is_paused else self.feeds[index].slot.take()
            if snapshot is not None:
                model.apply(snapshot)
                if index == self.drilled_index:
                    self.feed.timeline_request_id = model.selected_request_id
        elif isinstance(event, FeedLive):
            model.set_live()
        elif isinstance(event, FeedLost):
            model.set_lost(event.message, event.retry_in_s, event.num_attempts)
        if index == self.drilled_index:
            self.redraw()
        self.show_fleet()

    # ------------------------------------------------------------------ actions

    def action_drill(self) -> None:
        """Show the selected daemon in the full view (Enter)."""
        if self.drilled_index is not None:
            return
        index = self.drilled_index = self.selected_index
        self.model, self.feed = self.models[index], self.feeds[index]
        self.feed.timeline_request_id = self.model.selected_request_id
        header = self.query_one(HeaderPanel)
        header.address = self.addresses[index]
        header.repaint()
        self.screen.remove_class("-fleet")
        self.redraw(is_urgent=True)

    def action_show_fleet(self) -> None:
        """Back to the fleet table (Esc in the unzoomed full view)."""
        if self.drilled_index is None:
            return
        if self.model.is_paused:
            super().action_pause()  # the fleet row shows it live again
        self.feed.timeline_request_id = None
        self.drilled_index = None
        self.screen.add_class("-fleet")
        self.show_fleet()

    def action_zoom(self, number: int) -> None:
        """In the full view as before, except that Esc unzoomed goes back to the fleet."""
        if self.drilled_index is None:
            return
        if number == 0 and self.zoomed_number == 0:
            self.action_show_fleet()
            return
        super().action_zoom(number)

    def action_zoom_toggle(self, number: int) -> None:
        """Zoom keys act only in a daemon's full view (the table has no panels)."""
        if self.drilled_index is not None:
            super().action_zoom_toggle(number)

    def action_zoom_next(self) -> None:
        if self.drilled_index is not None:
            super().action_zoom_next()

    def action_select(self, delta: int) -> None:
        """Move the table's cursor, or in the full view the request selection."""
        if self.drilled_index is not None:
            super().action_select(delta)
            return
        self.selected_index = max(0, min(len(self.addresses) - 1, self.selected_index + delta))
        self.show_fleet()

    def action_pause(self) -> None:
        """Pause the drilled daemon's view (the table always shows the newest figures)."""
        if self.drilled_index is not None:
            super().action_pause()

    def action_sort(self) -> None:
        """Sort the drilled daemon's request table."""
        if self.drilled_index is not None:
            super().action_sort()


create_fleet_app = FleetApp
"""The fleet app (the name the CLI and the tests import)."""
