"""Service-level objectives and goodput: the request rate that meets every given target.

Throughput that misses its latency targets is of no use to a user, so the sweep ranks
settings by goodput rather than raw throughput.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmd.bench.positive_number import positive_number
from llmd.bench.request_record import RequestRecord
from llmd.errors import InvalidParameterError

SLO_NAMES = ("ttft", "tpot", "e2e")


@dataclass(frozen=True)
class Slo:
    """Latency targets in seconds; None means no target on that latency."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    @classmethod
    def parse(cls, text: str | None) -> Slo:
        """Parse "ttft=MS,tpot=MS,e2e=MS" (milliseconds, any subset, any order)."""
        if not text:
            return cls()
        values: dict[str, float] = {}
        for item in text.split(","):
            name, sep, value = item.strip().partition("=")
            if not sep or name not in SLO_NAMES:
                raise InvalidParameterError(
                    f"bad SLO item {item!r}: expected NAME=MS with NAME one of {SLO_NAMES}", "slo"
                )
            milliseconds = positive_number(
                value,
                "slo",
                not_a_number=f"SLO {name} is not a number: {value!r}",
                not_positive=f"SLO {name} must be positive, got {value}",
            )
            values[f"{name}_s"] = milliseconds / 1000
        return cls(**values)

    @property
    def is_empty(self) -> bool:
        """True when no target is set (every completed request is good)."""
        return self.ttft_s is None and self.tpot_s is None and self.e2e_s is None

    def as_ms(self) -> dict[str, float | None]:
        """The targets in milliseconds, for reports."""
        return {
            name: None if seconds is None else seconds * 1000
            for name, seconds in zip(SLO_NAMES, (self.ttft_s, self.tpot_s, self.e2e_s))
        }

    def is_met_by(self, record: RequestRecord) -> bool:
        """True when the request completed within every target (a 1-token reply has no TPOT)."""
        if not record.is_ok:
            return False
        if record.tpot is not None and self.tpot_s is not None and record.tpot > self.tpot_s:
            return False
        for target, value in ((self.ttft_s, record.ttft), (self.e2e_s, record.e2e)):
            if target is not None and (value is None or value > target):
                return False
        return True


def goodput(
    records: Sequence[RequestRecord], slo: Slo, duration_s: float
) -> dict[str, float | int | None]:
    """Requests/s meeting every target, how many did, and their fraction of all sent."""
    num_good = sum(1 for record in records if slo.is_met_by(record))
    return {
        "num_good": num_good,
        "requests_per_s": num_good / duration_s if duration_s > 0 else None,
        "fraction": num_good / len(records) if records else None,
    }
