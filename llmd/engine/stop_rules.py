"""When a sampled token ends its request: EOS, stop tokens, max_tokens, length, grammar.

Pure functions of a request and the engine's length limit, shared by the synchronous and
the async update paths (stop strings are matched by the detokenizer instead).
"""

from __future__ import annotations

from llmd.engine.request import FinishReason, Request


def check_stop(
    request: Request, token_id: int, max_model_len: int
) -> tuple[FinishReason | None, int | None]:
    """The finish reason (and stop token id) the newest token `token_id` ends `request` with."""
    params = request.sampling_params
    if request.num_output_tokens >= params.min_tokens:
        if not params.ignore_eos and token_id in request.eos_token_ids:
            return FinishReason.STOP, None
        if token_id in params.stop_token_ids:
            return FinishReason.STOP, token_id
    if request.num_output_tokens >= params.max_tokens:
        return FinishReason.LENGTH, None
    if request.num_tokens >= max_model_len:
        return FinishReason.LENGTH, None
    return None, None


def ends_by_length_after_sample(request: Request, max_model_len: int) -> bool:
    """True when the next sampled token will end the request by max_tokens or length."""
    return (
        request.num_output_tokens + 1 >= request.sampling_params.max_tokens
        or request.num_tokens + 1 >= max_model_len
    )


def grammar_stop(request: Request, token_id: int) -> FinishReason | None:
    """Advance the request's grammar by `token_id`; ERROR if the grammar refuses it.

    A complete text does not end the request here: its mask then allows only EOS, so the
    next step samples EOS and the request ends on it like any other (EOS not shown). A
    refused token cannot be sampled under the mask, so a refusal is a defect somewhere;
    the request then ends with an error rather than with invalid output.
    """
    grammar = request.grammar
    assert grammar is not None  # the caller checks
    if not grammar.accept(token_id):
        request.error_message = f"token {token_id} is outside the request's grammar"
        return FinishReason.ERROR
    return None
