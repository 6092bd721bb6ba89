"""One figure of a benchmark table as text: "-" when it is missing, else fixed-point.

The capacity probes and the sweep points print the same kind of cells; one function
keeps a missing value looking the same in every table.
"""

from __future__ import annotations


def number_cell(value: float | None, digits: int = 1, scale: float = 1.0) -> str:
    """`value * scale` with `digits` decimals, or "-" when there is no value."""
    return "-" if value is None else f"{value * scale:.{digits}f}"
