"""A test proposer for speculative decoding: the known continuation, some tokens corrupted.

A random tiny model rarely repeats itself, so n-gram drafts are seldom accepted; drafting
the spec-off output instead (with every `period`-th token wrong) makes verify steps of
every acceptance length happen, which is what the plumbing must survive.
"""

from __future__ import annotations


class OracleProposer:
    """Drafts the known continuation of each prompt, corrupting every `period`-th token."""

    def __init__(self, prompts, continuations, period: int = 0) -> None:
        self.cases = [(list(p), list(c)) for p, c in zip(prompts, continuations, strict=True)]
        self.period = period

    def propose(self, token_ids, max_num_tokens):
        token_ids = list(token_ids)
        for prompt, continuation in self.cases:
            num_done = len(token_ids) - len(prompt)
            if num_done >= 0 and token_ids == prompt + continuation[:num_done]:
                draft = continuation[num_done : num_done + max_num_tokens]
                if self.period:
                    draft = [
                        token + 1 if (num_done + j) % self.period == self.period - 1 else token
                        for j, token in enumerate(draft)
                    ]
                return draft
        return []
