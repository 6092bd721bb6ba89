"""A scatter chart drawn with characters, for sweeps viewed in a terminal (80 columns).

A sweep often runs over ssh where no PNG can be opened; a small character grid with one
marker per curve and the SLO as a dashed line shows the knee of each curve well enough.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MARKERS = "ABCDEFGHJKLMNPQRSTUVWXYZ"
AXIS_WIDTH = 10
"""Characters left of the plot area: a right-aligned y label and the axis."""
LOG_SCALE_RATIO = 20.0
"""A y range wider than this factor is drawn on a log scale."""


@dataclass(frozen=True)
class Curve:
    """One labelled series of (x, y) points."""

    label: str
    points: Sequence[tuple[float, float]]


def _scale(values: list[float], is_log: bool):
    transform = math.log10 if is_log else (lambda v: v)
    low, high = transform(min(values)), transform(max(values))
    if high == low:
        high = low + 1.0
    return lambda v: (transform(v) - low) / (high - low)


def render_chart(
    title: str,
    curves: Sequence[Curve],
    x_label: str,
    threshold: float | None = None,
    threshold_label: str = "SLO",
    width: int = 80,
    height: int = 12,
) -> str:
    """The chart as lines of at most `width` characters."""
    points = [
        (x, y) for curve in curves for x, y in curve.points if x is not None and y is not None
    ]
    if not points:
        return f"{title}: no data"
    plot_width = width - AXIS_WIDTH - 1
    xs = [x for x, _ in points] + [0.0]
    ys = [y for _, y in points] + ([threshold] if threshold is not None else [])
    is_log = min(ys) > 0 and max(ys) / min(ys) > LOG_SCALE_RATIO
    if not is_log:
        ys.append(0.0)
    x_of, y_of = _scale(xs, False), _scale(ys, is_log)
    grid = [[" "] * plot_width for _ in range(height)]

    def cell(x: float, y: float) -> tuple[int, int]:
        column = min(plot_width - 1, round(x_of(x) * (plot_width - 1)))
        row = min(height - 1, round((1 - y_of(y)) * (height - 1)))
        return row, column

    if threshold is not None:
        row, _ = cell(0.0, threshold)
        for column in range(0, plot_width, 2):
            grid[row][column] = "-"
    for marker, curve in zip(MARKERS, curves):
        for x, y in curve.points:
            if x is not None and y is not None:
                row, column = cell(x, y)
                grid[row][column] = marker
    top, bottom = max(ys), min(ys)
    scale_note = ", log scale" if is_log else ""
    lines = [f"{title}{scale_note}"[:width]]
    for index, row_cells in enumerate(grid):
        label = ""
        if index == 0:
            label = axis_label(top)
        elif index == height - 1:
            label = axis_label(bottom)
        lines.append(f"{label:>{AXIS_WIDTH - 2}} |{''.join(row_cells)}".rstrip())
    lines.append(" " * (AXIS_WIDTH - 1) + "+" + "-" * plot_width)
    right = axis_label(max(xs))
    axis = f"0{x_label:^{plot_width - 1 - len(right)}}{right}"
    lines.append(" " * AXIS_WIDTH + axis)
    legend = [f"{marker}={curve.label}" for marker, curve in zip(MARKERS, curves)]
    if threshold is not None:
        legend.append(f"--- {threshold_label} {threshold:g}")
    lines.extend(_wrap("  ".join(legend), width))
    return "\n".join(line[:width] for line in lines)


def axis_label(value: float) -> str:
    """A number in a few characters: 0.0123, 512, 4096, 24.05k, 1.5M."""
    for threshold, divisor, suffix in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if abs(value) >= threshold:
            return f"{value / divisor:.4g}{suffix}"
    return f"{value:.4g}"


def _wrap(text: str, width: int) -> list[str]:
    lines, current = [], ""
    for word in text.split("  "):
        if current and len(current) + 2 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current}  {word}" if current else word
    return [*lines, current] if current else lines
