"""One point of a sweep: a daemon setting and a request rate, and the figures it produced.

Points are saved one JSON file each and summarized into these small records, so a sweep
folder can be re-plotted and re-ranked without re-running anything.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llmd.bench.number_cell import number_cell
from llmd.bench.request_record import RequestRecord
from llmd.bench.slo import Slo, goodput

POINTS_DIR = "points"


@dataclass(frozen=True)
class SweepPoint:
    """The figures of one `bench serve` run inside a sweep."""

    max_num_batched_tokens: int
    max_num_seqs: int | None
    request_rate: float | str
    output_tokens_per_s: float | None
    requests_per_s: float | None
    ttft_p99_ms: float | None
    itl_p99_ms: float | None
    tpot_p99_ms: float | None
    ttft_median_ms: float | None
    goodput_per_s: float | None
    goodput_fraction: float | None
    num_failed: int
    slo_ms: dict[str, float | None]

    @property
    def setting(self) -> str:
        """The daemon setting as a label: "budget 256" or "budget 256, seqs 16"."""
        return setting_label(self.max_num_batched_tokens, self.max_num_seqs)

    @classmethod
    def from_result(
        cls, result: dict[str, Any], budget: int, max_num_seqs: int | None
    ) -> SweepPoint:
        """Summarize a `bench serve` result."""
        latency = result["latency_ms"]
        return cls(
            max_num_batched_tokens=budget,
            max_num_seqs=max_num_seqs,
            request_rate=result["config"]["request_rate"],
            output_tokens_per_s=result["throughput"]["output_tokens_per_s"],
            requests_per_s=result["throughput"]["requests_per_s"],
            ttft_p99_ms=latency["ttft"]["p99"],
            itl_p99_ms=latency["itl"]["p99"],
            tpot_p99_ms=latency["tpot"]["p99"],
            ttft_median_ms=latency["ttft"]["median"],
            goodput_per_s=result["goodput"]["requests_per_s"],
            goodput_fraction=result["goodput"]["fraction"],
            num_failed=result["num_failed"] + result["num_aborted"],
            slo_ms=result["goodput"]["slo_ms"],
        )


def setting_label(budget: int, max_num_seqs: int | None) -> str:
    """A daemon setting as a label: "budget 256" or "budget 256, seqs 16"."""
    seqs = "" if max_num_seqs is None else f", seqs {max_num_seqs}"
    return f"budget {budget}{seqs}"


def point_path(folder: Path, budget: int, max_num_seqs: int | None, rate: float | str) -> Path:
    """Where a point's full result is saved."""
    seqs = "" if max_num_seqs is None else f"_seqs{max_num_seqs}"
    return folder / POINTS_DIR / f"budget{budget}{seqs}_rate{rate}.json"


def save_point(folder: Path, result: dict[str, Any], budget: int, max_num_seqs: int | None) -> Path:
    """Write a point's full result (with the sweep setting added) and return its path."""
    path = point_path(folder, budget, max_num_seqs, result["config"]["request_rate"])
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = {**result, "sweep": {"max_num_batched_tokens": budget, "max_num_seqs": max_num_seqs}}
    path.write_text(json.dumps(saved, indent=1))
    return path


def rejudge(result: dict[str, Any], slo: Slo) -> dict[str, Any]:
    """The result with its goodput recomputed from the raw requests under other targets."""
    records = [RequestRecord.from_json(data) for data in result["requests"]]
    judged = goodput(records, slo, result["duration_s"])
    return {**result, "goodput": {"slo_ms": slo.as_ms(), **judged}}


def load_points(folder: str | Path, slo: Slo | None = None) -> list[SweepPoint]:
    """Every saved point of a sweep folder, by setting then rate; `slo` re-judges goodput."""
    paths = sorted((Path(folder) / POINTS_DIR).glob("*.json"))
    points = []
    for path in paths:
        result = json.loads(path.read_text())
        if slo is not None:
            result = rejudge(result, slo)
        setting = result.get("sweep", {})
        points.append(
            SweepPoint.from_result(
                result, setting["max_num_batched_tokens"], setting.get("max_num_seqs")
            )
        )
    return sorted(points, key=lambda p: (p.max_num_batched_tokens, p.max_num_seqs or 0, _rate(p)))


def _rate(point: SweepPoint) -> float:
    return float("inf") if point.request_rate == "inf" else float(point.request_rate)


def best_setting(points: list[SweepPoint]) -> SweepPoint | None:
    """The point with the highest goodput under the SLOs (ties: lower p99 TTFT)."""
    scored = [p for p in points if p.goodput_per_s is not None]
    if not scored:
        return None
    return max(scored, key=lambda p: (p.goodput_per_s, -(p.ttft_p99_ms or 0.0)))


def render_points_table(points: list[SweepPoint]) -> str:
    """One row per point, 80 columns wide."""
    header = (
        f"{'setting':<18}{'rate':>6}{'out tok/s':>10}{'p99 TTFT':>10}{'p99 ITL':>9}"
        f"{'good/s':>8}{'good %':>8}{'fail':>6}"
    )
    lines = [header, "-" * len(header)]
    for p in points:
        lines.append(
            f"{p.setting:<18}{p.request_rate!s:>6}{number_cell(p.output_tokens_per_s):>10}"
            f"{number_cell(p.ttft_p99_ms):>10}{number_cell(p.itl_p99_ms):>9}"
            f"{number_cell(p.goodput_per_s, 2):>8}{number_cell(p.goodput_fraction, scale=100):>8}"
            f"{p.num_failed:>6}"
        )
    return "\n".join(lines)


def points_json(points: list[SweepPoint]) -> list[dict[str, Any]]:
    """The summaries as plain dicts (for sweep.json)."""
    return [asdict(point) for point in points]
