"""Summary statistics of latency samples: mean, median, p90, p99 and max.

The benchmark reports every latency the same way, so one function computes them and the
tests check it against hand-computed cases.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmd.metrics.histogram import percentile

SUMMARY_KEYS = ("mean", "median", "p90", "p99", "max")


def summarize(values: Sequence[float]) -> dict[str, float | int | None]:
    """count and mean/median/p90/p99/max of `values` (linear interpolation between ranks)."""
    ordered = sorted(values)
    summary: dict[str, float | int | None] = {"count": len(ordered)}
    if not ordered:
        summary.update(dict.fromkeys(SUMMARY_KEYS))
        return summary
    summary["mean"] = sum(ordered) / len(ordered)
    summary["median"] = percentile(ordered, 50)
    summary["p90"] = percentile(ordered, 90)
    summary["p99"] = percentile(ordered, 99)
    summary["max"] = ordered[-1]
    return summary
