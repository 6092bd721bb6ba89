"""When a sampled token ends its request: EOS, stop token ids, max_tokens, max_model_len.

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
