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

    A verify chunk with k drafts gets k + 1 rows, its draft positions then its own (the
    grammar's state after each prefix of the drafts), as the runner samples every position.
    A request that ended after the plan was made (its sample is discarded) is left out.
    """
    constrained = [
        chunk
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
    num_rows = sum(1 + chunk.num_draft_tokens for chunk in constrained)
    bitmask = np.empty((num_rows, num_words), dtype=np.int32)  # [rows, words]
    row_bytes = num_words * 4
    base = bitmask.ctypes.data
    request_ids: list[str] = []
    draft_offsets: list[int] = []
    for chunk in constrained:
        request = chunk.request
        assert request is not None and request.grammar is not None  # the filter above
        address = base + len(request_ids) * row_bytes
        num_drafts = chunk.num_draft_tokens
        if num_drafts:
            request.grammar.fill_draft_masks(chunk.token_ids[-num_drafts:], address, row_bytes)
        else:
            request.grammar.fill_mask(address, row_bytes)
        request_ids.extend([request.request_id] * (1 + num_drafts))
        draft_offsets.extend([*range(num_drafts), -1])
    return GrammarBitmask(request_ids, bitmask, time.perf_counter() - started, draft_offsets)
