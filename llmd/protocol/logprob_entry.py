"""The map that carries one generated token's logprobs in `token` and `finished` messages.

A TypedDict rather than a message class: it travels as a plain map inside a message, and
the daemon, the client and the HTTP API then read its keys by name with their types known.
"""

from __future__ import annotations

from typing import TypedDict


class LogprobEntry(TypedDict):
    """One token: its id, log-probability and rank, the top alternatives, and their texts."""

    token_id: int
    logprob: float
    rank: int
    top_token_ids: list[int]
    top_logprobs: list[float]
    token: str
    """The token's own decoded text, special tokens included (what OpenAI's logprobs show)."""
    top_tokens: list[str]
