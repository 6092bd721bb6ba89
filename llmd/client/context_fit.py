"""Fitting `max_tokens` to the context: the warning, the cut, and reading the engine's refusal.

Pure functions shared by `llmd generate` and the chat, which both ask for what fits
instead of failing when the prompt leaves less room than `max_tokens` asks for.
"""

from __future__ import annotations

import re
from typing import Any


def fitted_max_tokens(num_prompt_tokens: int, max_tokens: int, max_model_len: int) -> int:
    """`max_tokens` cut to the room the context leaves after the prompt (at least 1).

    The engine refuses a request whose prompt plus max_tokens cannot fit (request_too_large);
    the CLI warns (context_warning) and asks for what fits instead, as a user expects.
    """
    return max(1, min(max_tokens, max_model_len - num_prompt_tokens))


MAX_TOKENS_REFUSAL = re.compile(
    r"prompt \((\d+) tokens\) plus max_tokens .* max_model_len is (\d+)"
)
"""The engine's request_too_large message for a max_tokens that overflows the context."""


def refused_max_tokens(error: Any) -> tuple[int, int] | None:
    """(prompt tokens, max_model_len) from a max_tokens refusal; None for other errors.

    A prompt that leaves no room at all is not retried (nothing would fit).
    """
    if getattr(error, "code", None) != "request_too_large":
        return None
    match = MAX_TOKENS_REFUSAL.search(str(error))
    if getattr(error, "parameter", None) != "max_tokens" or match is None:
        return None
    num_prompt_tokens, context_len = int(match.group(1)), int(match.group(2))
    return (num_prompt_tokens, context_len) if num_prompt_tokens < context_len else None


def context_warning(num_prompt_tokens: int, max_tokens: int, max_model_len: int) -> str | None:
    """A warning when the prompt plus max_tokens cannot fit the model's context."""
    room = max_model_len - num_prompt_tokens
    if num_prompt_tokens + max_tokens <= max_model_len:
        return None
    return (
        f"warning: --max-tokens {max_tokens} does not fit: the prompt has {num_prompt_tokens} "
        f"tokens and the context {max_model_len}, so at most {max(0, room)} tokens will be "
        "generated"
    )
