"""Engine-thread cost of the stats block map at 87k blocks: the old walk vs the new copy.

Run: .venv/bin/python scripts/bench_block_map.py  (prints one JSON line; medians of 15).
"""

import json
import statistics
import time
import types

from llmd.daemon import engine_state
from llmd.engine.block_manager import BlockManager
from llmd.engine.engine_snapshot import BlockMapCopy
from llmd.metrics.block_map import CACHED, FREE, SHARED, encode_block_map

NUM_BLOCKS = 87_000
manager = BlockManager(NUM_BLOCKS, 16)
running = []
# 64 running requests holding 1000 blocks each; 20k blocks hashed (cached) and free
for i, start in enumerate(range(0, 64_000, 1000)):
    running.append(
        types.SimpleNamespace(request_id=f"req-{i}", block_ids=list(range(start, start + 1000)))
    )
    for b in range(start, start + 1000):
        manager.blocks[b].ref_count = 1
for b in range(64_000, 84_000):
    manager.blocks[b].block_hash = b.to_bytes(8, "little")
    manager.cached_blocks[manager.blocks[b].block_hash] = manager.blocks[b]


def old_walk():  # the block_map(engine) of commit 8ea5a96, on the engine thread
    codes = [FREE] * manager.num_blocks
    for block in manager.blocks:
        if block.ref_count == 0 and block.block_hash is not None:
            codes[block.block_id] = CACHED
        elif block.ref_count > 1:
            codes[block.block_id] = SHARED
    owners = []
    for request in running:
        index = len(owners)
        owners.append(request.request_id)
        for block_id in request.block_ids:
            if codes[block_id] == FREE:
                codes[block_id] = index
    return encode_block_map(codes)


def new_copy():  # what the engine thread does now
    return BlockMapCopy(
        manager.num_blocks,
        tuple([block.block_id for block in manager.cached_blocks.values()]),
        tuple((r.request_id, tuple(r.block_ids)) for r in running if r.block_ids),
    )


def median_ms(fn, n=15):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


old = median_ms(old_walk)
new = median_ms(new_copy)
io = median_ms(lambda: engine_state.block_map(new_copy()))
print(
    json.dumps(
        {
            "num_blocks": NUM_BLOCKS,
            "engine_thread_ms_before": round(old, 2),
            "engine_thread_ms_after": round(new, 3),
            "ratio": round(old / new, 1),
            "io_thread_build_ms": round(io, 2),
        }
    )
)
