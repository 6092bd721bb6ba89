"""Checks a new request's token ids against the vocabulary before it is queued.

A token id the model has no embedding for would fail inside a forward pass, after the
request took a batch slot; refused here, it is a typed error naming the field instead.
"""

from __future__ import annotations

from llmd.errors import InvalidParameterError
from llmd.sampling_params import SamplingParams


def check_token_ids(prompt_token_ids: list[int], params: SamplingParams, vocab_size: int) -> None:
    """Raise InvalidParameterError naming `prompt_token_ids` or `stop_token_ids` when an id
    is not an integer in [0, vocab_size)."""
    for token_id in prompt_token_ids:
        if not isinstance(token_id, int) or isinstance(token_id, bool):
            raise InvalidParameterError("token ids must be integers", "prompt_token_ids")
        if not 0 <= token_id < vocab_size:
            raise InvalidParameterError(
                f"token id {token_id} is outside the vocabulary [0, {vocab_size})",
                "prompt_token_ids",
            )
    for token_id in params.stop_token_ids:
        if token_id >= vocab_size:
            raise InvalidParameterError(
                f"stop token id {token_id} is outside the vocabulary", "stop_token_ids"
            )
