"""A compact picture of the KV pool: who owns each block, run-length encoded and capped.

A GPU pool holds up to hundreds of thousands of blocks; the map is downsampled to at
most `max_cells` cells and run-length encoded so a snapshot stays a few kilobytes.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmd.protocol.engine_sections import BlockMap

FREE = -1
"""Holds nothing reusable."""
CACHED = -2
"""Unreferenced, but holds a reusable prefix."""
SHARED = -3
"""Referenced by several requests (a shared prefix)."""
DEFAULT_MAX_CELLS = 1024


def merge_codes(codes: Sequence[int]) -> int:
    """One code for several blocks or cells: an owner or shared beats cached, then free.

    The daemon downsamples with it and the TUI merges cells further with it, so a busy
    pool never looks emptier than it is at any zoom.
    """
    best = FREE
    for code in codes:
        if code >= 0 or code == SHARED:
            return code
        if code == CACHED:
            best = CACHED
    return best


def encode_block_map(owner_codes: Sequence[int], max_cells: int = DEFAULT_MAX_CELLS) -> BlockMap:
    """Encode per-block codes (an owner index >= 0, FREE, CACHED or SHARED) into cells' runs."""
    if max_cells <= 0:
        raise ValueError("max_cells must be positive")
    num_blocks = len(owner_codes)
    blocks_per_cell = max(1, -(-num_blocks // max_cells))
    runs: list[int] = []
    num_cells = 0
    for start in range(0, num_blocks, blocks_per_cell):
        code = merge_codes(owner_codes[start : start + blocks_per_cell])
        num_cells += 1
        if runs and runs[-2] == code:
            runs[-1] += 1
        else:
            runs += [code, 1]
    codes = {"free": FREE, "cached": CACHED, "shared": SHARED}
    return BlockMap(num_blocks, blocks_per_cell, num_cells, tuple(runs), codes=codes)
