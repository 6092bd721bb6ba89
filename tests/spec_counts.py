"""Independent counts for speculative decoding tests: sampling chunks the runner is given,
and the reconciliation of a lone request's counters with them.

The speculator's counters are checked against what the test counts itself, so a counter
that drifted from the steps really run (or from the tokens really emitted) fails.
"""

from __future__ import annotations

import itertools


class SamplingChunkCounter:
    """Counts the sampling chunks of every plan passed to the runner's `method`."""

    def __init__(self, runner, method: str = "execute") -> None:
        self.num_sampling_chunks = 0
        original = getattr(runner, method)

        def counting(plan):
            self.num_sampling_chunks += sum(1 for chunk in plan.chunks if chunk.is_sampling)
            return original(plan)

        setattr(runner, method, counting)


def assert_counts_reconcile(output, totals, num_sampling_chunks: int) -> None:
    """The only request's own counts equal the totals, and its tokens are one per sampling
    chunk plus the accepted drafts, fewer chunks than tokens (speculation saved steps)."""
    metrics = output.metrics
    assert (metrics.num_drafts, metrics.num_draft_tokens, metrics.num_accepted_tokens) == (
        totals.num_drafts, totals.num_draft_tokens, totals.num_accepted_tokens,
    )  # fmt: skip
    assert totals.num_drafts > 0 and totals.num_accepted_tokens > 0
    assert len(output.token_ids) == num_sampling_chunks + totals.num_accepted_tokens
    assert totals.num_accepted_tokens <= totals.num_draft_tokens
    assert sum(totals.accepted_per_position) == totals.num_accepted_tokens
    assert all(a >= b for a, b in itertools.pairwise(totals.accepted_per_position))
    assert num_sampling_chunks < len(output.token_ids)
