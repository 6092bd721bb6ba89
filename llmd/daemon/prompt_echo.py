"""The texts a request gets back about its prompt: token logprob maps and the echo.

The text thread owns the tokenizer, so it turns the engine's `TokenLogprob`s into wire
maps with each token's own text, and decodes a token-id prompt for OpenAI's `echo`.
"""

from __future__ import annotations

from typing import TypedDict

from llmd.daemon.live_request import LiveRequest
from llmd.engine.tokenizer import Tokenizer
from llmd.outputs import TokenLogprob
from llmd.protocol import LogprobEntry


def logprob_entry(logprob: TokenLogprob, tokenizer: Tokenizer) -> LogprobEntry:
    """The wire map of one token's logprobs, with its and its alternatives' texts."""

    def text_of(token_id: int) -> str:  # a token's own text, as OpenAI's logprobs show it
        return tokenizer.decode([token_id], skip_special_tokens=False)

    return {
        "token_id": logprob.token_id,
        "logprob": logprob.logprob,
        "rank": logprob.rank,
        "top_token_ids": list(logprob.top_token_ids),
        "top_logprobs": list(logprob.top_logprobs),
        "token": text_of(logprob.token_id),
        "top_tokens": [text_of(token_id) for token_id in logprob.top_token_ids],
    }


def prompt_logprob_entries(
    entries: list[TokenLogprob | None], tokenizer: Tokenizer
) -> list[LogprobEntry | None]:
    """The wire maps of a prompt's entries (None stays None: the first token's)."""
    return [None if entry is None else logprob_entry(entry, tokenizer) for entry in entries]


def echo_prompt(
    live: LiveRequest, tokenizer: Tokenizer, prompt: str | None, prompt_token_ids: list[int]
) -> None:
    """Keep the prompt's text (decoded when only ids were sent) and each token's text."""
    live.prompt_text = (
        prompt
        if prompt is not None
        else tokenizer.decode(prompt_token_ids, skip_special_tokens=False)
    )
    live.prompt_tokens = [
        tokenizer.decode([token_id], skip_special_tokens=False) for token_id in prompt_token_ids
    ]


class PromptFieldValues(TypedDict):
    """The optional prompt fields of a `token` or `finished` message."""

    prompt_logprobs: list[LogprobEntry | None] | None
    prompt_text: str | None
    prompt_tokens: list[str] | None


def take_prompt_fields(live: LiveRequest) -> PromptFieldValues:
    """The prompt fields for the request's next message, once (then they are dropped)."""
    fields: PromptFieldValues = {
        "prompt_logprobs": live.prompt_logprobs,
        "prompt_text": live.prompt_text,
        "prompt_tokens": live.prompt_tokens,
    }
    live.prompt_logprobs = live.prompt_text = live.prompt_tokens = None
    return fields
