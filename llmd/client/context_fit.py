"""Fitting `max_tokens` to the context: the cut, the warning, and what a refusal allows.

Pure functions shared by `llmd generate` and the chat, which both ask for what fits
instead of failing when the prompt leaves less room than `max_tokens` asks for.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmd.errors import RequestRejectedError


def fitted_max_tokens(num_prompt_tokens: int, max_tokens: int, max_model_len: int) -> int:
    """`max_tokens` cut to the room the context leaves after the prompt (at least 1).

    The engine refuses a request whose prompt plus max_tokens cannot fit (request_too_large);
    the CLI warns (context_warning) and asks for what fits instead, as a user expects.
    """
    return max(1, min(max_tokens, max_model_len - num_prompt_tokens))


@dataclass(frozen=True)
class MaxTokensCut:
    """A max_tokens refused for the context, and the smaller one that fits instead."""

    num_prompt_tokens: int
    max_model_len: int
    wanted_max_tokens: int
    """What the caller asked for (and was refused)."""
    max_tokens: int
    """The largest max_tokens that fits after the prompt: what the retry asks for."""

    def warning(self) -> str:
        """The CLI's warning that fewer tokens than asked for will be generated."""
        warning = context_warning(
            self.num_prompt_tokens, self.wanted_max_tokens, self.max_model_len
        )
        return warning or ""  # never empty: the wanted max_tokens was refused


def max_tokens_cut(error: BaseException, max_tokens: int) -> MaxTokensCut | None:
    """The cut a `request_too_large` refusal allows for a request of `max_tokens`.

    None for any other error, for a refusal without the daemon's numbers (the KV pool, an
    older daemon), and when no smaller max_tokens fits (the prompt alone fills the context).
    """
    if not isinstance(error, RequestRejectedError):
        return None
    num_fitting, num_prompt_tokens = error.max_fitting_tokens, error.num_prompt_tokens
    if num_fitting is None or num_prompt_tokens is None or error.max_model_len is None:
        return None
    if not 0 < num_fitting < max_tokens:
        return None
    return MaxTokensCut(num_prompt_tokens, error.max_model_len, max_tokens, num_fitting)


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
