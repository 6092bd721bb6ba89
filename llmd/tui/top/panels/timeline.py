"""The selected request's timeline: queued, prefill chunks, decode tokens, preemptions."""

from __future__ import annotations

from rich.text import Text

from llmd.tui.formatting import MISSING, fmt_seconds
from llmd.tui.top.panels.base import Panel, join_lines, styled_runs, wrapped
from llmd.tui.top.panels.requests import table_lines, tall_and_unzoomed
from llmd.tui.top.timeline_strip import LEGEND, PREEMPTED, PREFILL, QUEUED, timeline_strip
from llmd.tui.top.view import TopView
from llmd.tui.top.wait_text import prefill_text, waits_text

GLYPH_STYLES = {PREFILL: "bold yellow", PREEMPTED: "bold red", QUEUED: "dim"}


class TimelinePanel(Panel):
    """Arrival to now (or finish) in one strip, with the milestones, and why it waited."""

    TITLE = "Timeline"
    IS_SLOW = True
    FITS_CONTENT = True

    def fits_content(self) -> bool:
        return tall_and_unzoomed(self)

    def max_lines(self, screen_height: int) -> int:
        return table_lines(self, screen_height)

    def state_of(self, view: TopView) -> object:
        selected = view.selected_request_id
        is_listed = any(row.request_id == selected for row in view.requests)
        return view.timeline, selected, is_listed

    def show(self, view: TopView, now: float = 0.0, slow_redraw_s: float = 0.0) -> bool:
        """A newly selected request's timeline is drawn at once; its updates wait their turn."""
        timeline_id = None if view.timeline is None else view.timeline.request_id
        if timeline_id != getattr(self, "_shown_timeline_id", None):
            slow_redraw_s = 0.0
        is_drawn = super().show(view, now, slow_redraw_s)
        if is_drawn:
            self._shown_timeline_id = timeline_id
        return is_drawn

    def draw(self, view: TopView, width: int, height: int) -> Text:
        timeline = view.timeline
        if timeline is None:
            if view.selected_request_id is None:
                return Text("select a request (↑↓)", style="dim")
            selected = view.selected_request_id
            if any(row.request_id == selected for row in view.requests):
                return Text(f"{selected}: waiting for its timeline…", style="dim")
            return Text(f"{selected} has left the table; ↑↓ selects another", style="dim")
        title = Text(f"{timeline.request_id} ", style="bold")
        if timeline.label is not None:
            title.append(f"{timeline.label} ", style="bold cyan")
        title.append(f"{timeline.state} · age {fmt_seconds(timeline.age_s)}")
        milestones = Text(
            f"scheduled +{fmt_seconds(timeline.first_scheduled_s)} · first token "
            f"+{fmt_seconds(timeline.first_token_s)} · {timeline.num_tokens_total} tokens",
            style="dim",
        )
        if timeline.finished_s is not None:
            milestones.append(f" · done +{fmt_seconds(timeline.finished_s)}", style="dim")
        why = waits_text(timeline.waits, timeline.waiting_on)
        chunks = Text(prefill_text(timeline.waits), style="dim")
        strip = styled_runs(timeline_strip(timeline, width), lambda c: GLYPH_STYLES.get(c, "green"))
        end = timeline.finished_s if timeline.finished_s is not None else timeline.age_s
        end_text = fmt_seconds(end) if end is not None else MISSING
        axis = Text("0".ljust(max(1, width - len(end_text))) + end_text, style="dim")
        console = self.app.console
        lines = [
            *wrapped([title, why, milestones, chunks], width, console),
            strip,
            axis,
            *wrapped([Text(LEGEND, style="dim")], width, console),
        ]
        return join_lines(lines, height)
