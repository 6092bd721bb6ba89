"""The token masks of one step's constrained rows, filled from their matchers before launch.

The mask must reflect every token sampled so far, so it is built just before the plan runs
(after the previous step's samples were applied, in both scheduling modes), on the host,
as one int32 array the runner copies to the device with the step's other inputs.
"""

from __future__ import annotations

import time

import numpy as np

from llmd.engine.scheduler_output import GrammarBitmask, SchedulerOutput


def build_step_bitmask(plan: SchedulerOutput, vocab_size: int) -> GrammarBitmask | None:
    """Masks [rows, ceil(vocab / 32)] int32 of the plan's sampling chunks that have a grammar.

    A request that ended after the plan was made (its sample is discarded) is left out.
    """
    constrained = [
        chunk.request
        for chunk in plan.chunks
        if chunk.is_sampling
        and chunk.request is not None
        and chunk.request.grammar is not None
        and not chunk.request.is_finished
    ]
    if not constrained:
        return None
    started = time.perf_counter()
    num_words = (vocab_size + 31) // 32
    bitmask = np.empty((len(constrained), num_words), dtype=np.int32)  # [rows, words]
    row_bytes = num_words * 4
    base = bitmask.ctypes.data
    for row, request in enumerate(constrained):
        request.grammar.fill_mask(base + row * row_bytes, row_bytes)  # type: ignore[union-attr]
    request_ids = [request.request_id for request in constrained]
    return GrammarBitmask(request_ids, bitmask, time.perf_counter() - started)
