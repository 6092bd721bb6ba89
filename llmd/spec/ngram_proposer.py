"""Prompt-lookup drafts: the tokens that followed the last occurrence of a request's suffix.

Text that quotes or edits its input (code edits, RAG answers, summaries, repeated chat
turns) continues as it did before, so copying what followed the latest earlier match of
the last n tokens is a draft that verification often accepts, at almost no cost.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


class NgramProposer:
    """Drafts up to k tokens by matching the last n tokens (n from max down to min)."""

    def __init__(self, min_n: int, max_n: int) -> None:
        self.min_n = min_n
        self.max_n = max_n

    def propose(self, token_ids: Sequence[int], max_num_tokens: int) -> list[int]:
        """The tokens after an earlier occurrence of the longest matching suffix.

        Of its occurrences, the latest one followed by `max_num_tokens` tokens, else the
        earliest (the most tokens follow it); none found (or no room): []. Vectorized over
        positions: one numpy comparison per suffix length tried.
        """
        num_tokens = len(token_ids)
        if max_num_tokens <= 0 or num_tokens <= self.min_n:
            return []
        tokens = np.asarray(token_ids, dtype=np.int64)  # [num_tokens]
        for n in range(min(self.max_n, num_tokens - 1), self.min_n - 1, -1):
            suffix = tokens[num_tokens - n :]  # [n]
            # Windows that start early enough to have a token after them (not the suffix).
            windows = sliding_window_view(tokens[: num_tokens - 1], n)  # [num_tokens - n, n]
            starts = np.flatnonzero((windows == suffix).all(axis=1))
            if starts.size:
                whole = starts[starts <= num_tokens - n - max_num_tokens]
                first = int(whole[-1] if whole.size else starts[0]) + n
                return tokens[first : first + max_num_tokens].tolist()
        return []
