"""OpenAI request fields -> the daemon's `sampling_params`, validated by SamplingParams.

The daemon validates again on arrival; checking here too lets a bad value come back as
a 400 naming the field the HTTP client sent (`max_completion_tokens`, `top_logprobs`).
"""

from __future__ import annotations

from typing import Any

from llmd.errors import InvalidParameterError
from llmd.http.errors import bad_request
from llmd.http.generation_group import PromptInput
from llmd.http.request_models import ChatCompletionRequest, CompletionRequest, SamplingFields
from llmd.sampling_params import SamplingParams

DEFAULT_COMPLETION_MAX_TOKENS = 16
"""OpenAI's default for /v1/completions; chat runs until a stop or max_model_len."""

_PASSED_AS_IS = (
    "temperature",
    "top_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "top_k",
    "min_p",
    "repetition_penalty",
    "min_tokens",
    "ignore_eos",
    "stop_token_ids",
    "skip_special_tokens",
    "can_speculate",
)


def completion_params(
    request: CompletionRequest, structured_outputs: dict[str, Any] | None = None
) -> dict[str, object]:
    """sampling_params of a completion request (with its checked output constraint)."""
    params = _shared(request, structured_outputs)
    params["max_tokens"] = (
        DEFAULT_COMPLETION_MAX_TOKENS if request.max_tokens is None else request.max_tokens
    )
    if request.max_tokens == 0:  # echo only (checked): one token is sampled, then dropped
        params["max_tokens"] = 1
        params.pop("min_tokens", None)
    if request.logprobs is not None:
        params["logprobs"] = request.logprobs
    wanted = [request.prompt_logprobs]
    if request.echo and request.logprobs is not None:
        wanted.append(request.logprobs)  # the echoed prompt's logprobs come first
    asked = [num for num in wanted if num is not None]
    if asked:
        params["prompt_logprobs"] = max(asked)
    return _validated(params, {})


def chat_params(
    request: ChatCompletionRequest,
    max_model_len: int,
    structured_outputs: dict[str, Any] | None = None,
) -> dict[str, object]:
    """sampling_params of a chat request; without a limit, generation may fill the context."""
    params = _shared(request, structured_outputs)
    renamed: dict[str, str] = {}
    if request.max_completion_tokens is not None:
        params["max_tokens"] = request.max_completion_tokens
        renamed["max_tokens"] = "max_completion_tokens"
    elif request.max_tokens is not None:
        params["max_tokens"] = request.max_tokens
    else:
        params["max_tokens"] = max_model_len
    if request.logprobs:
        params["logprobs"] = request.top_logprobs or 0
        renamed["logprobs"] = "top_logprobs"
    return _validated(params, renamed)


def _shared(
    request: SamplingFields, structured_outputs: dict[str, Any] | None
) -> dict[str, object]:
    params: dict[str, object] = {name: getattr(request, name) for name in _PASSED_AS_IS}
    params = {name: value for name, value in params.items() if value is not None}
    if structured_outputs is not None:
        params["structured_outputs"] = structured_outputs
    if request.stop is not None:
        params["stop"] = [request.stop] if isinstance(request.stop, str) else list(request.stop)
    return params


def _validated(params: dict[str, object], renamed: dict[str, str]) -> dict[str, object]:
    try:
        SamplingParams.from_dict(params)
    except InvalidParameterError as error:
        field = renamed.get(error.parameter or "", error.parameter)
        raise bad_request(f"{field}: {error.message}", field) from None
    return params


def fan_out(inputs: list[PromptInput], params: dict[str, object], n: int) -> list[PromptInput]:
    """`n` daemon requests per input, prompt-major (choice index = prompt * n + j).

    With a `seed`, choice j samples with seed + j: the n choices differ, yet the same
    request gives the same choices again (and choice 0 equals the n=1 answer).
    """
    seed = params.get("seed")  # validated: None or an int

    def choice_params(j: int) -> dict[str, object]:
        return params if not isinstance(seed, int) or j == 0 else {**params, "seed": seed + j}

    return [{**request, "params": choice_params(j)} for request in inputs for j in range(n)]
