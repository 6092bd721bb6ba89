"""One request's position in its grammar: which tokens may come next, advanced per token.

The scheduler advances it with every sampled token and the engine asks it for the next
step's token mask, so the state lives with the request (kept across preemption, as the
request keeps its tokens) and never needs rebuilding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class GrammarMatcher:
    """Wraps an llguidance matcher: accept a token, fill a mask row, tell when text is done."""

    def __init__(self, matcher: Any, kind: str, vocab_size: int) -> None:
        self._matcher = matcher
        self.kind = kind
        """The constraint kind (json, regex, ...), for errors and metrics."""
        self.vocab_size = vocab_size
        """Token ids the matcher's tokenizer knows: llguidance errors on any other id."""

    def accept(self, token_id: int) -> bool:
        """Advance by one sampled token; False (and an error state) if the grammar forbids it."""
        return bool(self._matcher.consume_token(token_id))

    def num_allowed(self, token_ids: Sequence[int]) -> int:
        """How many of `token_ids`, from the first, the grammar allows in a row from here.

        Speculative drafts are cut there, as the target could never sample the refused one;
        the state does not change (an unknown id stops the count before llguidance sees it,
        which would put the matcher in its error state).
        """
        num_known = 0
        for token_id in token_ids:
            if not 0 <= token_id < self.vocab_size:
                break
            num_known += 1
        if num_known == 0:
            return 0
        return int(self._matcher.validate_tokens(list(token_ids[:num_known])))

    @property
    def is_terminated(self) -> bool:
        """True once the text is complete and nothing more may follow (generation ends)."""
        return bool(self._matcher.is_stopped())

    @property
    def is_accepting(self) -> bool:
        """True when the text so far is a complete match (EOS is allowed now)."""
        return bool(self._matcher.is_accepting())

    @property
    def error(self) -> str | None:
        """Why the matcher failed, or None."""
        return self._matcher.get_error() if self._matcher.is_error() else None

    def fill_mask(self, address: int, num_bytes: int) -> None:
        """Write the allowed-token bitmask (bit i of word i // 32 = token i) at `address`."""
        self._matcher.unsafe_compute_mask_ptr(address, num_bytes)

    def fill_draft_masks(self, draft_ids: Sequence[int], address: int, num_bytes: int) -> None:
        """Write `len(draft_ids) + 1` masks of `num_bytes` each from `address`: mask j is the
        one after drafts 1..j, so a verify step samples each position as a plain step would.

        A copy of the matcher walks the drafts, so the request's own state stays where it
        is; from a stop (only EOS may follow) or a refused draft (never accepted, so the
        samples after it are not kept) on, the copy stays put and the masks repeat.
        """
        self.fill_mask(address, num_bytes)
        if not draft_ids:
            return
        walker = self._matcher.deep_copy()
        num_allowed = self.num_allowed(draft_ids)
        for j, token_id in enumerate(draft_ids, start=1):
            if j <= num_allowed and not walker.is_stopped():
                walker.consume_token(token_id)
            walker.unsafe_compute_mask_ptr(address + j * num_bytes, num_bytes)
