"""The sweep's picture as a PNG: p99 TTFT and p99 ITL against output throughput.

matplotlib is an optional extra (`pip install llmd[plot]`); without it the sweep still
prints its table and terminal chart and says how to get the PNG.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from llmd.bench.sweep_point import SweepPoint


def has_matplotlib() -> bool:
    """True when the PNG can be drawn."""
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError:
        return False
    return True


def curves_by_setting(points: Sequence[SweepPoint]) -> dict[str, list[SweepPoint]]:
    """Points grouped per daemon setting, each curve in increasing request rate.

    Joined in rate order, a curve that bends back shows saturation: more offered load,
    no more throughput.
    """
    curves: dict[str, list[SweepPoint]] = {}
    for point in points:
        curves.setdefault(point.setting, []).append(point)
    for curve in curves.values():
        curve.sort(key=lambda p: float(p.request_rate))
    return curves


def write_png(points: Sequence[SweepPoint], path: str | Path, title: str = "") -> Path:
    """Draw both panels, one curve per setting, SLO lines dashed; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, ScalarFormatter

    figure, (ttft_axes, itl_axes) = plt.subplots(1, 2, figsize=(11, 4.4))
    slo = points[0].slo_ms if points else {}
    for label, curve in curves_by_setting(points).items():
        xs = [p.output_tokens_per_s for p in curve]
        for axes, ys in (
            (ttft_axes, [p.ttft_p99_ms for p in curve]),
            (itl_axes, [p.itl_p99_ms for p in curve]),
        ):
            axes.plot(xs, ys, marker="o", label=label)
            for point, x, y in zip(curve, xs, ys):
                if x is not None and y is not None:
                    axes.annotate(f"{point.request_rate:g}/s" if not isinstance(
                        point.request_rate, str) else "inf", (x, y), textcoords="offset points",
                        xytext=(4, 4), fontsize=7, color="dimgray")  # fmt: skip
    for axes, name, ylabel, slo_name in (
        (ttft_axes, "p99 TTFT", "ms", "ttft"),
        (itl_axes, "p99 ITL", "ms", "tpot"),
    ):
        target = slo.get(slo_name)
        if target is not None:
            axes.axhline(target, color="red", linestyle="--", linewidth=1, label=f"{slo_name} SLO")
        axes.set_xlabel("output throughput (tok/s)")
        axes.set_ylabel(ylabel)
        axes.set_title(name)
        axes.set_yscale("log")
        axes.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axes.yaxis.set_major_formatter(ScalarFormatter())
        axes.yaxis.set_minor_formatter(plt.NullFormatter())
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
