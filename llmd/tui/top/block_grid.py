"""The KV block map as a grid of characters: which request owns each block, what is cached.

The daemon already downsamples a large pool to at most 1024 cells; the grid merges cells
further to fit the panel, with the daemon's rule (an owner or shared block beats a cached
one, which beats a free one), so a busy pool never looks emptier than it is.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

from llmd.metrics import CACHED, FREE, SHARED, merge_codes

FREE_GLYPH = "·"
CACHED_GLYPH = "░"
SHARED_GLYPH = "≡"
OWNER_GLYPHS = string.ascii_uppercase + string.ascii_lowercase + string.digits
STATE_GLYPHS = {FREE: FREE_GLYPH, CACHED: CACHED_GLYPH, SHARED: SHARED_GLYPH}
"""The glyph of each code that is not an owner index."""


def owner_glyph(owner_index: int) -> str:
    """The letter drawn for the request at `owners[owner_index]` (cycling past 62)."""
    return OWNER_GLYPHS[owner_index % len(OWNER_GLYPHS)]


def fit_cells(cells: Sequence[int], capacity: int) -> tuple[list[int], int]:
    """Cells merged so at most `capacity` remain, and how many input cells each covers."""
    if capacity <= 0:
        return [], 1
    group = max(1, -(-len(cells) // capacity))
    merged = [merge_codes(cells[start : start + group]) for start in range(0, len(cells), group)]
    return merged, group


def glyph(code: int) -> str:
    """The character of one cell's code."""
    return STATE_GLYPHS.get(code) or owner_glyph(code)


def grid_rows(cells: Sequence[int], width: int, max_rows: int) -> tuple[list[list[int]], int]:
    """Cells (merged to fit) laid out in rows of `width`; and input cells per grid cell."""
    if width <= 0 or max_rows <= 0 or not cells:
        return [], 1
    merged, group = fit_cells(cells, width * max_rows)
    return [merged[start : start + width] for start in range(0, len(merged), width)], group
