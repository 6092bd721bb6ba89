"""ScenarioResult: one scenario's verdict, the figures it was judged on and the counts behind them.

A verdict is a list of named checks so that a failure says which promise broke, not just
that something did.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ScenarioResult:
    """What one scenario measured and whether each of its promises held."""

    name: str
    counts: dict[str, Any] = field(default_factory=dict)
    """Raw counts and measurements (sent, answered, seconds, kilobytes...)."""
    checks: dict[str, bool] = field(default_factory=dict)
    """Promise -> whether it held."""
    notes: list[str] = field(default_factory=list)
    """Human-readable detail on failures (first few examples)."""
    started_at: float = field(default_factory=time.monotonic)
    wall_s: float = 0.0

    def check(self, promise: str, is_held: bool, note: str | None = None) -> bool:
        """Record one promise's verdict (and a note when it broke)."""
        self.checks[promise] = bool(is_held)
        if not is_held and note:
            self.notes.append(f"{promise}: {note}")
        return bool(is_held)

    def note(self, text: str) -> None:
        """Keep a detail for the report (capped so a storm of failures stays readable)."""
        if len(self.notes) < 20:
            self.notes.append(text)

    @property
    def passed(self) -> bool:
        """True when every check held (and at least one was made)."""
        return bool(self.checks) and all(self.checks.values())

    def finish(self) -> ScenarioResult:
        """Stamp the wall time and return self."""
        self.wall_s = round(time.monotonic() - self.started_at, 2)
        return self

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict for the report."""
        return {
            "name": self.name,
            "passed": self.passed,
            "checks": self.checks,
            "counts": self.counts,
            "notes": self.notes,
            "wall_s": self.wall_s,
        }
