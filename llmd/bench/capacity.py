"""Capacity at SLO: the highest request rate at which enough requests meet their targets.

A latency-vs-throughput curve still leaves the user to read off "how much load can this
take"; bisecting the rate on one seeded workload answers it with a single number, and
keeps every probe so the answer can be checked.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from llmd.bench.number_cell import number_cell
from llmd.errors import InvalidParameterError


@dataclass(frozen=True)
class CapacityOptions:
    """How the rate is searched; field docs are the `--capacity-*` options' help."""

    attainment_threshold: float = 0.9
    """Fraction of all requests sent that must meet every SLO target for a rate to pass."""
    min_rate_rps: float = 1.0
    """The first and lowest rate probed."""
    max_rate_rps: float | None = None
    """The highest rate probed; None doubles from min_rate_rps until a rate fails."""
    relative_tolerance: float = 0.1
    """Stop when the lowest failing rate is within this fraction above the passing one."""
    max_probes: int = 10

    def __post_init__(self) -> None:
        if not 0 < self.attainment_threshold <= 1:
            raise InvalidParameterError(
                f"attainment threshold must be in (0, 1], got {self.attainment_threshold}",
                "attainment_threshold",
            )
        if not 0 < self.min_rate_rps < math.inf:
            raise InvalidParameterError(
                f"the lowest rate must be positive and finite, got {self.min_rate_rps}",
                "min_rate_rps",
            )
        if self.max_rate_rps is not None and not self.min_rate_rps < self.max_rate_rps < math.inf:
            raise InvalidParameterError(
                f"the highest rate must be finite and above the lowest ({self.min_rate_rps}), "
                f"got {self.max_rate_rps}",
                "max_rate_rps",
            )
        if not self.relative_tolerance > 0:
            raise InvalidParameterError(
                f"relative tolerance must be positive, got {self.relative_tolerance}",
                "relative_tolerance",
            )
        if self.max_probes < 2:
            raise InvalidParameterError(
                f"a search needs at least 2 probes, got {self.max_probes}", "max_probes"
            )


@dataclass(frozen=True)
class Probe:
    """One run of the workload at one rate and the figures that judged it."""

    rate_rps: float
    attainment: float | None
    """Fraction of all requests sent that met every target (None: nothing was sent)."""
    goodput_rps: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    num_requests: int = 0
    num_completed: int = 0

    @classmethod
    def from_result(cls, result: dict[str, Any], rate_rps: float) -> Probe:
        """The probe's figures from a `bench serve` result (report.build_result)."""
        latency = result["latency_ms"]
        return cls(
            rate_rps=rate_rps,
            attainment=result["goodput"]["fraction"],
            goodput_rps=result["goodput"]["requests_per_s"],
            ttft_p99_ms=latency["ttft"]["p99"],
            tpot_p99_ms=latency["tpot"]["p99"],
            num_requests=result["num_requests"],
            num_completed=result["num_completed"],
        )

    def passes(self, threshold: float) -> bool:
        """True when at least `threshold` of the requests met the SLO."""
        return self.attainment is not None and self.attainment >= threshold


@dataclass(frozen=True)
class Capacity:
    """The search's answer: the highest passing rate, how sure it is, and every probe."""

    rate_rps: float
    """The highest rate that passed; 0 when even the lowest rate failed."""
    failing_rate_rps: float | None
    """The lowest rate that failed; None when every rate tried passed."""
    is_bracketed: bool
    """True when a passing rate lies below a failing one (capacity is between them)."""
    is_converged: bool
    """True when the bracket is within the relative tolerance (not cut by max_probes)."""
    note: str
    options: CapacityOptions
    probes: tuple[Probe, ...]

    def to_json(self, slo_ms: dict[str, float | None]) -> dict[str, Any]:
        """The `capacity_at_slo` object of a result's JSON."""
        threshold = self.options.attainment_threshold
        return {
            "rate_rps": self.rate_rps,
            "attainment_threshold": threshold,
            "slo_ms": slo_ms,
            "is_bracketed": self.is_bracketed,
            "is_converged": self.is_converged,
            "failing_rate_rps": self.failing_rate_rps,
            "relative_tolerance": self.options.relative_tolerance,
            "min_rate_rps": self.options.min_rate_rps,
            "max_rate_rps": self.options.max_rate_rps,
            "max_probes": self.options.max_probes,
            "note": self.note,
            "probes": [{**asdict(p), "passed": p.passes(threshold)} for p in self.probes],
        }


def rate_text(rate: float) -> str:
    """A rate to 3 significant digits without an exponent: 2000, 35.4, 0.25."""
    return f"{float(f'{rate:.3g}'):g}"


def _round_between(rate: float, low: float, high: float) -> float:
    """`rate` to 3 significant digits when that stays strictly inside (low, high)."""
    rounded = float(f"{rate:.3g}")
    return rounded if low < rounded < high else rate


def find_capacity(measure: Callable[[float], Probe], options: CapacityOptions) -> Capacity:
    """Bracket the rate (double from the lowest, or jump to the highest), then bisect.

    Bisection is geometric (rates span orders of magnitude and the tolerance is relative)
    and assumes attainment falls as the rate rises: every probe above the answer failed,
    every probe at or below it passed.
    """
    threshold = options.attainment_threshold
    probes: list[Probe] = []

    def passes(rate: float) -> bool:
        probe = measure(rate)
        probes.append(probe)
        return probe.passes(threshold)

    def result(rate: float, failing: float | None, note: str, is_converged: bool) -> Capacity:
        return Capacity(rate, failing, failing is not None and rate > 0, is_converged, note,
                        options, tuple(probes))  # fmt: skip

    low = options.min_rate_rps
    if not passes(low):
        return result(0.0, low, f"even the lowest rate, {rate_text(low)} req/s, fails the SLO; "
                      "lower --capacity-min-rate", False)  # fmt: skip
    high: float | None = None
    while high is None:
        if options.max_rate_rps is not None and low >= options.max_rate_rps:
            note = f"the highest rate, {rate_text(low)} req/s, passes: capacity is at least that"
            return result(low, None, note + "; raise --capacity-max-rate", False)
        if len(probes) >= options.max_probes:
            return result(low, None, f"no rate failed within {options.max_probes} probes: "
                          f"capacity is at least {rate_text(low)} req/s", False)  # fmt: skip
        rate = options.max_rate_rps if options.max_rate_rps is not None else 2 * low
        if passes(rate):
            low = rate
        else:
            high = rate
    while high / low > 1 + options.relative_tolerance and len(probes) < options.max_probes:
        rate = _round_between(math.sqrt(low * high), low, high)
        if passes(rate):
            low = rate
        else:
            high = rate
    is_converged = high / low <= 1 + options.relative_tolerance
    between = f"between {rate_text(low)} (passes) and {rate_text(high)} req/s (fails)"
    note = between if is_converged else f"stopped after {options.max_probes} probes {between}"
    return result(low, high, note, is_converged)


def slo_text(slo_ms: dict[str, float | None]) -> str:
    """The targets as one reads them, e.g. "TTFT<=500ms TPOT<=50ms"."""
    return " ".join(f"{name.upper()}<={value:g}ms" for name, value in slo_ms.items()
                    if value is not None)  # fmt: skip


def capacity_line(capacity: dict[str, Any]) -> str:
    """The one-line summary of a `capacity_at_slo` object."""
    rate = capacity["rate_rps"]
    bound = "" if capacity["is_bracketed"] or rate == 0 else ">= "
    percent = f"{100 * capacity['attainment_threshold']:g}%"
    return (
        f"capacity at SLO: {bound}{rate_text(rate)} req/s ({percent} within "
        f"{slo_text(capacity['slo_ms'])}; {capacity['note']})"
    )


def render_probes(capacity: dict[str, Any]) -> str:
    """One row per probe, in the order they ran."""
    header = (
        f"{'probe':>5}{'rate':>10}{'attain %':>10}{'good/s':>9}{'p99 TTFT':>10}{'p99 TPOT':>10}"
    )
    lines = [header]
    for index, probe in enumerate(capacity["probes"], 1):
        lines.append(
            f"{index:>5}{rate_text(probe['rate_rps']):>10}"
            f"{number_cell(probe['attainment'], scale=100):>10}"
            f"{number_cell(probe['goodput_rps']):>9}{number_cell(probe['ttft_p99_ms']):>10}"
            f"{number_cell(probe['tpot_p99_ms']):>10}  {'pass' if probe['passed'] else 'fail'}"
        )
    return "\n".join(lines)
