"""`llmd bench sweep`: one daemon per token budget, `bench serve` at several rates on each.

The question it answers is which --max-num-batched-tokens (and --max-num-seqs) gives the
most goodput under the SLOs on this workload; each setting needs its own daemon, so the
sweep starts and stops them and saves every point as it goes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from llmd.bench.capacity import CapacityOptions
from llmd.bench.png_plot import curves_by_setting, has_matplotlib, write_png
from llmd.bench.serve import ServeOptions, run_capacity, run_serve_async, warm_up
from llmd.bench.slo import Slo
from llmd.bench.sweep_capacity import (
    load_capacities,
    most_capacity,
    render_capacities,
    save_capacity,
)
from llmd.bench.sweep_point import (
    SweepPoint,
    best_setting,
    load_points,
    points_json,
    render_points_table,
    save_point,
)
from llmd.bench.text_chart import Curve, render_chart
from llmd.errors import InvalidParameterError

PNG_NAME = "sweep.png"
SUMMARY_NAME = "sweep.json"


@dataclass(frozen=True)
class SweepOptions:
    """The settings to compare, the rates to try, and the workload each point runs."""

    budgets: tuple[int, ...]
    request_rates: tuple[float, ...]
    output_dir: Path
    workload: ServeOptions
    max_num_seqs: tuple[int | None, ...] = (None,)
    model: str | None = None
    serve_args: tuple[str, ...] = ()
    """Extra `llmd serve` arguments for every daemon (e.g. --num-blocks 512)."""
    start_timeout_s: float = 300.0
    capacity: CapacityOptions | None = None
    """Also search each setting's capacity at the workload's SLO (after its rates)."""


def _start_daemon(options: SweepOptions, budget: int, seqs: int | None, address: str, log: Path):
    command = [sys.executable, "-m", "llmd.cli", "serve", "--address", address,
               "--max-num-batched-tokens", str(budget)]  # fmt: skip
    if seqs is not None:
        command += ["--max-num-seqs", str(seqs)]
    if options.model:
        command += ["--model", options.model]
    command += list(options.serve_args)
    with open(log, "ab") as log_file:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log_file)
    from llmd.client import Client, DaemonNotRunningError

    deadline = time.monotonic() + options.start_timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise InvalidParameterError(
                f"the daemon for budget {budget} exited with {process.returncode}; see {log}",
                "serve_args",
            )
        try:
            with Client(address, timeout=1.0) as client:
                if client.health()["is_healthy"]:
                    return process
        except DaemonNotRunningError:
            pass
        time.sleep(0.2)
    process.kill()
    raise TimeoutError(f"the daemon for budget {budget} was not healthy in time; see {log}")


def _stop_daemon(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_sweep(options: SweepOptions, echo: Callable[[str], None] = print) -> list[SweepPoint]:
    """Run every (setting, rate) point, saving each under output_dir/points; returns them."""
    if not options.budgets:
        raise InvalidParameterError("a sweep needs at least one budget", "budgets")
    if not options.request_rates and options.capacity is None:
        raise InvalidParameterError("a sweep needs --request-rates or --capacity", "request_rates")
    folder = options.output_dir
    folder.mkdir(parents=True, exist_ok=True)
    points = []
    with tempfile.TemporaryDirectory(prefix="llmd-sweep-") as runtime:
        address = f"ipc://{runtime}/daemon.sock"
        for budget, seqs in itertools.product(options.budgets, options.max_num_seqs):
            label = f"budget {budget}" + ("" if seqs is None else f", seqs {seqs}")
            echo(f"starting a daemon with {label}")
            log = folder / f"daemon_budget{budget}{'' if seqs is None else f'_seqs{seqs}'}.log"
            process = _start_daemon(options, budget, seqs, address, log)
            try:
                warm_up(dataclasses.replace(options.workload, address=address))
                for index, rate in enumerate(options.request_rates):
                    # Each rate draws new prompts (the same ones for every setting): reusing
                    # a seed would let a point hit the prefix cache its predecessor filled.
                    workload = dataclasses.replace(
                        options.workload,
                        address=address,
                        request_rate=rate,
                        seed=options.workload.seed + index,
                    )
                    result = asyncio.run(run_serve_async(workload))
                    save_point(folder, result, budget, seqs)
                    point = SweepPoint.from_result(result, budget, seqs)
                    points.append(point)
                    echo(
                        f"  rate {rate:g}: {point.output_tokens_per_s or 0:.1f} out tok/s, "
                        f"p99 TTFT {point.ttft_p99_ms or 0:.0f} ms, "
                        f"goodput {point.goodput_per_s or 0:.2f} req/s"
                    )
                if options.capacity is not None:
                    _search_capacity(options, address, budget, seqs, echo)
            finally:
                _stop_daemon(process)
    return points


def _search_capacity(options: SweepOptions, address: str, budget: int, seqs: int | None,
                     echo: Callable[[str], None]) -> None:  # fmt: skip
    """One setting's capacity search, on prompts no rate point of the sweep used."""
    workload = dataclasses.replace(
        options.workload, address=address, seed=options.workload.seed + len(options.request_rates)
    )
    echo("  capacity at SLO:")
    result = run_capacity(workload, options.capacity, echo, warm_up_first=False)[1]
    save_capacity(options.output_dir, result["capacity_at_slo"], budget, seqs)


def render_sweep(points: Sequence[SweepPoint]) -> str:
    """Table, two terminal charts (p99 TTFT and p99 ITL vs output tok/s) and the best setting."""
    points = list(points)
    if not points:
        return "no sweep points"
    curves = curves_by_setting(points)
    slo = points[0].slo_ms
    parts = [render_points_table(points), ""]
    for title, attribute, slo_name in (
        ("p99 TTFT (ms) vs output tok/s", "ttft_p99_ms", "ttft"),
        ("p99 ITL (ms) vs output tok/s", "itl_p99_ms", "tpot"),
    ):
        chart_curves = [
            Curve(label, [(p.output_tokens_per_s, getattr(p, attribute)) for p in curve])
            for label, curve in curves.items()
        ]
        parts.append(render_chart(title, chart_curves, "output tok/s", slo.get(slo_name),
                                  f"{slo_name} SLO"))  # fmt: skip
        parts.append("")
    best = best_setting(points)
    slo_text = ", ".join(f"{k}<={v:g}ms" for k, v in slo.items() if v is not None) or "no SLO"
    if best is None or not best.goodput_per_s:
        parts.append(f"no setting met {slo_text} at any rate tried")
    else:
        parts.append(
            f"best: {best.setting} (at rate {best.request_rate}), goodput "
            f"{best.goodput_per_s:.2f} req/s, {best.output_tokens_per_s or 0:.1f} output tok/s\n"
            f"      {100 * (best.goodput_fraction or 0):.0f}% of its requests meet {slo_text}"
        )
    return "\n".join(parts)


def finish_sweep(
    folder: str | Path, png_path: str | Path | None = None, slo: Slo | None = None
) -> str:
    """Summarize a sweep folder: sweep.json, the PNG when matplotlib is there, the text.

    With `slo`, every point's goodput is recomputed from its raw requests under those
    targets, so a sweep can be re-ranked for another SLO without being re-run; capacities
    stay those searched under the sweep's own SLO (their lines name it).
    """
    folder = Path(folder)
    points = load_points(folder, slo)
    capacities = load_capacities(folder)
    if not points and not capacities:
        raise InvalidParameterError(f"no sweep points under {folder / 'points'}", "folder")
    best = best_setting(points)
    most = most_capacity(capacities)
    summary = {
        "points": points_json(points),
        "best": None if best is None else best.setting,
        "capacity": [capacity.to_json() for capacity in capacities],
        "most_capacity": None if most is None else most.setting,
    }
    (folder / SUMMARY_NAME).write_text(json.dumps(summary, indent=1))
    parts = [render_sweep(points)] if points else []
    if capacities:
        parts.append(render_capacities(capacities))
    text = "\n\n".join(parts)
    if not points:
        return text
    if has_matplotlib():
        path = write_png(points, png_path or folder / PNG_NAME)
        text += f"\nplot: {path}"
    else:
        text += "\nno PNG: install the plot extra (pip install 'llmd[plot]') for matplotlib"
    return text
