"""Short, fixed-width renderings of numbers, durations, sparklines and bars.

Terminal panels have a few cells per value; every helper here returns a compact string
and prints "-" for a value the daemon could not compute yet (None).
"""

from __future__ import annotations

from collections.abc import Sequence

SPARK_LEVELS = "▁▂▃▄▅▆▇█"
MISSING = "-"


def fmt_seconds(seconds: float | None) -> str:
    """A latency: microseconds, milliseconds or seconds, three significant digits."""
    if seconds is None:
        return MISSING
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f}µs"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3g}ms"
    if seconds < 100:
        return f"{seconds:.3g}s"
    return fmt_uptime(seconds)


def fmt_uptime(seconds: float | None) -> str:
    """A long duration: 42s, 3m07s, 5h02m, 2d03h."""
    if seconds is None:
        return MISSING
    total = int(seconds)
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def fmt_number(value: float | None) -> str:
    """A count or rate with a k/M/G suffix: 7, 12.5, 3.4k, 1.2M."""
    if value is None:
        return MISSING
    magnitude = abs(value)
    for threshold, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= threshold:
            return f"{value / threshold:.3g}{suffix}"
    if magnitude >= 100 or float(value).is_integer():
        return f"{value:.0f}"
    return f"{value:.3g}"


def fmt_percent(fraction: float | None) -> str:
    """A fraction as a whole percentage."""
    if fraction is None:
        return MISSING
    return f"{fraction * 100:.0f}%"


def sparkline(values: Sequence[float], width: int, ceiling: float | None = None) -> str:
    """The last `width` values as block characters scaled to `ceiling` (default: their max)."""
    if width <= 0:
        return ""
    recent = list(values)[-width:]
    top = ceiling if ceiling is not None else max(recent, default=0.0)
    if top <= 0:
        cells = [SPARK_LEVELS[0] if recent else " "] * len(recent)
    else:
        last = len(SPARK_LEVELS) - 1
        cells = [SPARK_LEVELS[max(0, min(last, round(v / top * last)))] for v in recent]
    return "".join(cells).rjust(width)


def tall_sparkline(
    values: Sequence[float], width: int, rows: int, ceiling: float | None = None
) -> list[str]:
    """`sparkline` `rows` lines tall (top line first): eight levels per line, so a tall
    panel shows finer steps; one row is exactly `sparkline`."""
    if rows <= 1:
        return [sparkline(values, width, ceiling)]
    if width <= 0:
        return [""] * rows
    recent = list(values)[-width:]
    top = ceiling if ceiling is not None else max(recent, default=0.0)
    num_eighths = len(SPARK_LEVELS) * rows
    heights = [1 + (round(v / top * (num_eighths - 1)) if top > 0 else 0) for v in recent]
    lines = []
    for row in reversed(range(rows)):
        cells = (
            max(0, min(len(SPARK_LEVELS), height - row * len(SPARK_LEVELS))) for height in heights
        )
        lines.append("".join(SPARK_LEVELS[n - 1] if n else " " for n in cells).rjust(width))
    return lines


def bar(fractions: Sequence[float], symbols: str, width: int, fill: str = " ") -> str:
    """A stacked horizontal bar: `fractions[i]` of `width` cells drawn with `symbols[i]`."""
    if width <= 0:
        return ""
    cells: list[str] = []
    cumulative = 0.0
    for fraction, symbol in zip(fractions, symbols):
        cumulative += max(0.0, fraction)
        end = min(width, round(cumulative * width))
        cells.extend(symbol * (end - len(cells)))
    return "".join(cells).ljust(width, fill)


def truncate(text: str, width: int) -> str:
    """`text` cut to `width` cells with an ellipsis when it does not fit."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    return text[: width - 1] + "…"


def printable(text: str) -> str:
    """`text` without control characters other than newline and tab (they garble terminals)."""
    return "".join(
        char for char in text if char in "\n\t" or not (ord(char) < 32 or 127 <= ord(char) < 160)
    )
