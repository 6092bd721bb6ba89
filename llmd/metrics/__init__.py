"""Serving metrics kept by the daemon: sliding-window histograms, rates, goodput, block maps.

Pure standard library, so the daemon records them without torch and the clients and
terminal apps can reuse the helpers (percentiles, block-map merging) to read snapshots; the
sections they produce are the protocol's typed snapshot sections.
"""

from __future__ import annotations

from llmd.metrics.block_map import (
    CACHED,
    FREE,
    SHARED,
    encode_block_map,
    merge_codes,
)
from llmd.metrics.goodput import GoodputTracker
from llmd.metrics.histogram import SlidingHistogram, percentile
from llmd.metrics.rate import RateMeter
from llmd.metrics.serving_metrics import ServingMetrics

__all__ = [
    "CACHED",
    "FREE",
    "SHARED",
    "GoodputTracker",
    "RateMeter",
    "ServingMetrics",
    "SlidingHistogram",
    "encode_block_map",
    "merge_codes",
    "percentile",
]
