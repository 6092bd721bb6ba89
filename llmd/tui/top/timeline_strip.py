"""A request's lifecycle as one row of characters: queued, prefill chunks, decode, preemption.

Time runs left to right from arrival to now (or to the finish); decode cells are shaded by
how many tokens landed in them, so stalls between tokens show up as gaps.
"""

from __future__ import annotations

from llmd.protocol.engine_sections import RequestTimeline
from llmd.tui.formatting import SPARK_LEVELS

QUEUED = "·"
PREFILL = "P"
PREEMPTED = "X"
STALLED = " "
LEGEND = f"{QUEUED} queued  {PREFILL} prefill  ▁▄█ decode tokens  {PREEMPTED} preempted"


def queued_spans(timeline: RequestTimeline) -> list[tuple[float, float]]:
    """Intervals (seconds since arrival) the request spent waiting to be scheduled."""
    end = timeline.finished_s if timeline.finished_s is not None else timeline.age_s
    first = timeline.first_scheduled_s
    spans = [(0.0, end if first is None else first)]
    events = sorted(timeline.events)
    for index, (moment, kind, _) in enumerate(events):
        if kind == "preempted":
            resumed = next((m for m, k, _ in events[index + 1 :] if k == "prefill"), end)
            spans.append((moment, resumed))
    return spans


def timeline_strip(timeline: RequestTimeline, width: int) -> str:
    """`width` characters covering arrival to now; see LEGEND for the symbols."""
    if width <= 0:
        return ""
    end = timeline.finished_s if timeline.finished_s is not None else timeline.age_s
    span = max(end, 1e-6)

    def cell_of(moment: float) -> int:
        return max(0, min(width - 1, int(moment / span * width)))

    tokens = [0] * width
    for moment in timeline.token_times_s:
        tokens[cell_of(moment)] += 1
    marks: list[str | None] = [None] * width
    for moment, kind, _ in timeline.events:
        cell = cell_of(moment)
        if kind == "preempted":
            marks[cell] = PREEMPTED
        elif kind == "prefill" and marks[cell] is None:
            marks[cell] = PREFILL
    queued = [False] * width
    for start, stop in queued_spans(timeline):
        for cell in range(cell_of(start), cell_of(stop) + 1 if stop > start else cell_of(start)):
            queued[cell] = True
    most_tokens = max(tokens, default=0)
    last_level = len(SPARK_LEVELS) - 1
    cells: list[str] = []
    for cell in range(width):
        mark = marks[cell]
        if mark is not None:
            cells.append(mark)
        elif tokens[cell]:
            level = max(0, min(last_level, round(tokens[cell] / most_tokens * last_level)))
            cells.append(SPARK_LEVELS[level])
        elif queued[cell]:
            cells.append(QUEUED)
        else:
            cells.append(STALLED)
    return "".join(cells)
