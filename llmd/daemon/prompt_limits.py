"""Cheap checks of a prompt that run before anything is built from it.

A token id outside the vocabulary must be refused before the detokenizer sees it, and a
prompt text far beyond what the model can take must be refused before it is tokenized:
both cost nothing to check and would otherwise cost an `internal` error or seconds of CPU.
"""

from __future__ import annotations

import json

from llmd.errors import InvalidParameterError, RequestRejectedError

MAX_CHARS_PER_TOKEN = 64
"""A generous bound on the characters one token stands for (real vocabularies stay near 16)."""


class PromptLimits:
    """The vocabulary size and the longest prompt text worth tokenizing for one engine."""

    def __init__(self, vocab_size: int, max_model_len: int) -> None:
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self.max_prompt_chars = max_model_len * MAX_CHARS_PER_TOKEN
        """Longer prompt text cannot fit max_model_len tokens: refused before tokenizing."""

    def check_token_ids(self, token_ids: list[int]) -> None:
        """Raise invalid_parameter naming prompt_token_ids unless every id is in the vocabulary."""
        vocab_size = self.vocab_size
        for token_id in token_ids:
            if not 0 <= token_id < vocab_size:
                raise InvalidParameterError(
                    f"token id {token_id} is outside the vocabulary [0, {vocab_size})",
                    "prompt_token_ids",
                )

    def check_text(
        self,
        prompt: str | None,
        messages: list[dict[str, object]] | None,
        tools: list[dict[str, object]] | None = None,
    ) -> None:
        """Raise request_too_large when the text could never fit max_model_len tokens."""
        if prompt is not None:
            num_chars, parameter = len(prompt), "prompt"
        elif messages is not None:
            num_chars = sum(_num_chars(value) for m in messages for value in m.values())
            num_chars += sum(_num_chars(tool) for tool in tools or [])
            parameter = "messages"
        else:
            return
        if num_chars > self.max_prompt_chars:
            raise RequestRejectedError(
                f"the prompt has {num_chars} characters; at most {MAX_CHARS_PER_TOKEN} per "
                f"token, that is more than max_model_len ({self.max_model_len}) tokens can hold",
                parameter,
            )


def _num_chars(value: object) -> int:
    """A message field's length as text (a tool call or a tool as its JSON)."""
    if isinstance(value, str):
        return len(value)
    return len(json.dumps(value, default=str))
