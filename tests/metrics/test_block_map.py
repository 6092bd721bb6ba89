"""Block maps: run-length encoding, downsampling priority, decoding."""

from __future__ import annotations

from llmd.metrics import CACHED, FREE, SHARED, encode_block_map


def test_round_trip_without_downsampling():
    codes = [0, 0, 0, FREE, FREE, CACHED, 1, 1, SHARED, FREE]
    encoded = encode_block_map(codes, max_cells=64)
    assert encoded.blocks_per_cell == 1 and encoded.num_cells == 10
    assert encoded.runs == (0, 3, FREE, 2, CACHED, 1, 1, 2, SHARED, 1, FREE, 1)
    assert encoded.cells() == codes


def test_downsampled_cells_prefer_owners_then_cached():
    codes = [FREE, FREE, FREE, CACHED, FREE, 2, FREE, FREE, SHARED, FREE]
    encoded = encode_block_map(codes, max_cells=5)  # two blocks per cell
    assert encoded.blocks_per_cell == 2 and encoded.num_blocks == 10
    assert encoded.cells() == [FREE, CACHED, 2, FREE, SHARED]


def test_large_pools_stay_small():
    codes = [FREE] * 100_000
    codes[50_000:50_100] = [3] * 100
    encoded = encode_block_map(codes)
    assert encoded.num_cells <= 1024 and len(encoded.runs) <= 6
    assert 3 in encoded.cells()
    assert encode_block_map([]).runs == ()
