"""A sweep setting's capacity at SLO: saved one JSON file per setting, ranked across them.

Capacity is the figure a user sizes a deployment by, so the sweep keeps it next to its
points and names the setting that sustains the highest rate within the SLO.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmd.bench.capacity import capacity_line, rate_text
from llmd.bench.sweep_point import setting_label

CAPACITY_DIR = "capacity"


@dataclass(frozen=True)
class SettingCapacity:
    """One daemon setting and the `capacity_at_slo` object its search produced."""

    max_num_batched_tokens: int
    max_num_seqs: int | None
    capacity: dict[str, Any]

    @property
    def setting(self) -> str:
        """The daemon setting as a label (sweep_point.setting_label)."""
        return setting_label(self.max_num_batched_tokens, self.max_num_seqs)

    def to_json(self) -> dict[str, Any]:
        """The setting, its label and its capacity object, for sweep.json."""
        return {"max_num_batched_tokens": self.max_num_batched_tokens,
                "max_num_seqs": self.max_num_seqs, "setting": self.setting,
                "capacity_at_slo": self.capacity}  # fmt: skip


def save_capacity(
    folder: Path, capacity: dict[str, Any], budget: int, max_num_seqs: int | None
) -> Path:
    """Write a setting's capacity object under folder/capacity and return the path."""
    seqs = "" if max_num_seqs is None else f"_seqs{max_num_seqs}"
    path = folder / CAPACITY_DIR / f"budget{budget}{seqs}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = SettingCapacity(budget, max_num_seqs, capacity).to_json()
    path.write_text(json.dumps(saved, indent=1))
    return path


def load_capacities(folder: str | Path) -> list[SettingCapacity]:
    """Every saved setting capacity of a sweep folder, by setting (none: an empty list)."""
    found = []
    for path in sorted((Path(folder) / CAPACITY_DIR).glob("*.json")):
        data = json.loads(path.read_text())
        found.append(SettingCapacity(data["max_num_batched_tokens"], data.get("max_num_seqs"),
                                     data["capacity_at_slo"]))  # fmt: skip
    return sorted(found, key=lambda c: (c.max_num_batched_tokens, c.max_num_seqs or 0))


def most_capacity(capacities: list[SettingCapacity]) -> SettingCapacity | None:
    """The setting with the highest capacity (None when none passed even its lowest rate)."""
    passing = [c for c in capacities if c.capacity["rate_rps"] > 0]
    return max(passing, key=lambda c: c.capacity["rate_rps"]) if passing else None


def render_capacities(capacities: list[SettingCapacity]) -> str:
    """One capacity line per setting and the setting with the most."""
    if not capacities:
        return ""
    lines = [f"{c.setting:<18}{capacity_line(c.capacity)}" for c in capacities]
    best = most_capacity(capacities)
    if best is None:
        lines.append("most capacity: no setting passed even its lowest rate")
    else:
        rate = best.capacity["rate_rps"]
        tied = [c.setting for c in capacities if c.capacity["rate_rps"] == rate]
        bound = "" if best.capacity["is_bracketed"] else ">= "
        tie = f"tied at {bound}" if len(tied) > 1 else bound
        lines.append(f"most capacity: {', '.join(tied)} ({tie}{rate_text(rate)} req/s)")
    return "\n".join(lines)
