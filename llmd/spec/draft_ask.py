"""What a batched proposer is asked for one request: its id, its tokens and the most drafts.

Kept apart from the speculator (which builds the asks) and the proposers (which answer
them), so that a proposer with torch imports this leaf and never the scheduler's modules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DraftAsk:
    """Up to `max_num_tokens` guesses of the tokens after `token_ids`, for one request."""

    request_id: str
    """Whose proposal: a proposer with per-request state keys it by this id."""
    token_ids: Sequence[int]
    """The request's prompt and output tokens so far (read during the call, never kept)."""
    max_num_tokens: int
    """Most draft tokens the request can verify this step (at least 1)."""
