"""The daemon's per-token logprob maps in OpenAI's two layouts (completions and chat).

The daemon sends `{token_id, logprob, token, top_token_ids, top_logprobs, top_tokens}`;
completions want parallel lists, chat wants one object per token with its UTF-8 bytes.
"""

from __future__ import annotations

import math

from llmd.protocol import LogprobEntry

MIN_LOGPROB = -9999.0
"""Stands in for -inf, which JSON cannot carry."""


def finite(value: float) -> float:
    """A logprob JSON can encode."""
    return value if math.isfinite(value) else MIN_LOGPROB


def completion_logprobs(entries: list[LogprobEntry], text_offset: int) -> dict[str, object]:
    """{tokens, token_logprobs, top_logprobs, text_offset}; offsets start at `text_offset`."""
    offsets = []
    for entry in entries:
        offsets.append(text_offset)
        text_offset += len(entry["token"])
    return {
        "tokens": [entry["token"] for entry in entries],
        "token_logprobs": [finite(entry["logprob"]) for entry in entries],
        "top_logprobs": [
            {t: finite(lp) for t, lp in zip(entry["top_tokens"], entry["top_logprobs"])}
            for entry in entries
        ],
        "text_offset": offsets,
    }


def chat_logprobs(entries: list[LogprobEntry]) -> dict[str, object]:
    """{content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}."""
    return {
        "content": [
            {
                **_token(entry["token"], entry["logprob"]),
                "top_logprobs": [
                    _token(t, lp) for t, lp in zip(entry["top_tokens"], entry["top_logprobs"])
                ],
            }
            for entry in entries
        ]
    }


def _token(text: str, logprob: float) -> dict[str, object]:
    return {"token": text, "logprob": finite(logprob), "bytes": list(text.encode())}
