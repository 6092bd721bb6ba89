"""One request's position in its grammar: which tokens may come next, advanced per token.

The scheduler advances it with every sampled token and the engine asks it for the next
step's token mask, so the state lives with the request (kept across preemption, as the
request keeps its tokens) and never needs rebuilding.
"""

from __future__ import annotations

from typing import Any


class GrammarMatcher:
    """Wraps an llguidance matcher: accept a token, fill a mask row, tell when text is done."""

    def __init__(self, matcher: Any, kind: str) -> None:
        self._matcher = matcher
        self.kind = kind
        """The constraint kind (json, regex, ...), for errors and metrics."""

    def accept(self, token_id: int) -> bool:
        """Advance by one sampled token; False (and an error state) if the grammar forbids it."""
        return bool(self._matcher.consume_token(token_id))

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
