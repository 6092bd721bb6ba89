"""Applies a step's grammar bitmasks to the logits: disallowed tokens get -inf.

Structured outputs restrict each constrained row to the tokens its grammar allows next;
doing it on the device, on the packed 32-tokens-per-word masks, keeps the host-to-device
copy at vocab / 8 bytes per row and the rest of sampling unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from llmd.engine.scheduler_output import GrammarBitmask
from llmd.runner.host_transfer import to_device


@dataclass(frozen=True)
class AllowedTokens:
    """The constrained rows of a sampling batch and their packed masks, on the device."""

    row_indices: torch.Tensor  # [num_constrained] int64, rows of the batch
    bitmask: torch.Tensor  # [num_constrained, ceil(vocab / 32)] int32


def allowed_tokens_for(
    grammar: GrammarBitmask,
    row_of: dict[str, int],
    device: torch.device,
    first_draft_row_of: dict[str, int] | None = None,
) -> AllowedTokens:
    """Move a plan's masks to the device, naming each mask's row in the sampling batch.

    `row_of` gives each sampling chunk's own row, `first_draft_row_of` each verify chunk's
    first draft row (its draft rows follow in order): a mask with draft offset j goes there.
    """
    offsets = grammar.draft_offsets or [-1] * len(grammar.request_ids)
    draft_row_of = first_draft_row_of or {}
    rows = [
        row_of[request_id] if offset < 0 else draft_row_of[request_id] + offset
        for request_id, offset in zip(grammar.request_ids, offsets, strict=True)
    ]
    bitmask = torch.from_numpy(grammar.bitmask).to(device, non_blocking=False)
    return AllowedTokens(to_device(rows, torch.int64, device), bitmask)


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Bool [rows, vocab_size] from packed int32 [rows, words]: True where a token is allowed.

    Tokens past 32 * words (a mask narrower than the logits) are not allowed.
    """
    bits = torch.arange(32, dtype=torch.int32, device=bitmask.device)  # [32]
    allowed = ((bitmask[:, :, None] >> bits) & 1).bool()  # [rows, words, 32]
    allowed = allowed.reshape(bitmask.shape[0], -1)  # [rows, 32 * words]
    if allowed.shape[1] >= vocab_size:
        return allowed[:, :vocab_size]
    padding = allowed.new_zeros(bitmask.shape[0], vocab_size - allowed.shape[1])
    return torch.cat([allowed, padding], dim=1)


def apply_allowed_tokens(logits: torch.Tensor, allowed: AllowedTokens) -> torch.Tensor:
    """`logits` [num_rows, vocab] with every disallowed token of the constrained rows at -inf."""
    rows = allowed.row_indices
    mask = unpack_bitmask(allowed.bitmask, logits.shape[1])  # [num_constrained, vocab]
    constrained = logits[rows].masked_fill(~mask, float("-inf"))
    return logits.index_put((rows,), constrained)
