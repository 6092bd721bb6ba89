#!/usr/bin/env python
"""Offline throughput of llmd against HF static batching: a wrapper of llmd.bench.offline.

Kept so that existing commands (and scripts/gpu_check.sh, which imports `SHAPES` and
`make_checkpoint` from here) keep working; `llmd bench offline` runs the same `main`.

    .venv/bin/python scripts/bench_offline.py --num-requests 64 --repeats 3
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from llmd.bench.offline import main
from llmd.bench.workload import SHAPES, make_checkpoint, make_workload

__all__ = ["SHAPES", "main", "make_checkpoint", "make_workload"]

if __name__ == "__main__":
    sys.exit(main())
