"""Sampled token ids of a step whose results the host has not read yet (async scheduling).

With async scheduling the next step is prepared while this one runs, so a decode's input
token exists only on the device; the step builders read it from here by request id
instead of waiting for it to reach the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from llmd.errors import LLMDError


@dataclass
class PendingTokens:
    """The device tensor of one step's sampled ids and each sampling request's row in it."""

    token_ids: torch.Tensor  # [num_sampled] int64, on the device
    index_of: dict[str, int]
    """Request id -> row of `token_ids` holding that request's sampled token."""

    def source_index(self, request_id: str) -> int:
        """Row of `token_ids` holding the request's pending token; a typed error if none."""
        index = self.index_of.get(request_id)
        if index is None:
            raise LLMDError(
                f"request {request_id} has a pending token that no running step sampled",
                "async_scheduling",
            )
        return index


def pending_source(pending: PendingTokens | None, request_id: str) -> int:
    """Like `PendingTokens.source_index`, with a typed error when no step is pending."""
    if pending is None:
        raise LLMDError(
            f"request {request_id} has a pending token but no step is pending",
            "async_scheduling",
        )
    return pending.source_index(request_id)
