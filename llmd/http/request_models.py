"""Request bodies of /v1/completions and /v1/chat/completions, as OpenAI documents them.

pydantic checks types and names the offending field in a 400; fields OpenAI defines that
llmd does not implement (suffix, best_of, logit_bias, ...) are refused by name rather than ignored.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from llmd.http.errors import HttpError, bad_request
from llmd.http.structured_fields import ResponseFormat

MAX_CHOICES = 128
"""Most choices (`n`) per prompt, OpenAI's own limit."""


class StreamOptions(BaseModel):
    """`stream_options`: whether the last chunk before [DONE] carries usage."""

    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class SamplingFields(BaseModel):
    """Fields both endpoints share: model, streaming, sampling and stopping."""

    model_config = ConfigDict(extra="ignore")  # OpenAI clients send fields we need not read
    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=MAX_CHOICES)
    """Choices per prompt: each one daemon request (prefix caching shares the prompt)."""
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # vLLM's extensions, under vLLM's names.
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int | None = None
    ignore_eos: bool | None = None
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool | None = None
    # llmd's extension: each choice's `timings` (phases and why it waited; llmd/http/timings.py).
    return_timings: bool = False
    # llmd's extension, SamplingParams' own name: false keeps speculative decoding from
    # drafting for this request (strict: a non-boolean is a 400, not coerced to true or false).
    can_speculate: StrictBool | None = None
    # Output constraints, OpenAI's and vLLM's (at most one; llmd/http/structured_fields.py).
    response_format: ResponseFormat | None = None
    structured_outputs: dict[str, Any] | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    guided_decoding_backend: str | None = None
    """Accepted and ignored: llmd has one grammar backend (llguidance)."""

    def check_supported(self) -> None:
        """Refuse, by name, what llmd does not implement."""
        if self.logit_bias:
            raise bad_request("logit_bias is not supported", "logit_bias")


class CompletionRequest(SamplingFields):
    """POST /v1/completions."""

    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None
    logprobs: int | None = Field(default=None, ge=0)
    # vLLM's extension: each choice's prompt tokens' logprobs and top alternatives.
    prompt_logprobs: int | None = Field(default=None, ge=0)

    def check_supported(self) -> None:
        """Also refuse suffix, best_of > 1, and max_tokens 0 without echo or streamed."""
        super().check_supported()
        if self.max_tokens == 0 and not self.echo:
            raise bad_request(
                "max_tokens 0 needs echo: true (it returns only the prompt)", "max_tokens"
            )
        if self.max_tokens == 0 and self.stream:
            raise bad_request("max_tokens 0 cannot be streamed", "max_tokens")
        if self.suffix:
            raise bad_request("suffix (insertion) is not supported", "suffix")
        if self.best_of not in (None, 1):
            raise bad_request(f"only best_of=1 is supported, got {self.best_of}", "best_of")

    def prompts(self) -> list[str | list[int]]:
        """The batch of prompts: each a string or a list of token ids."""
        prompt = self.prompt
        if isinstance(prompt, str):
            prompts: list[str | list[int]] = [prompt]
        elif prompt and all(isinstance(item, int) for item in prompt):
            prompts = [list(prompt)]  # type: ignore[arg-type]
        else:
            prompts = list(prompt)  # type: ignore[arg-type]
        if not prompts:
            raise bad_request("must not be empty", "prompt")
        for index, item in enumerate(prompts):
            if len(item) == 0:
                raise bad_request(f"prompt {index} is empty", "prompt")
            if isinstance(item, list) and any(token_id < 0 for token_id in item):
                raise bad_request(f"prompt {index} has a negative token id", "prompt")
        return prompts


class ContentPart(BaseModel):
    """One part of a message's content; only text parts are supported."""

    model_config = ConfigDict(extra="ignore")
    type: str
    text: str | None = None


class FunctionCall(BaseModel):
    """The function of an earlier assistant tool call: its name and arguments (JSON text)."""

    model_config = ConfigDict(extra="ignore")
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCallMessage(BaseModel):
    """One tool call of an earlier assistant message."""

    model_config = ConfigDict(extra="ignore")
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """One message of a conversation (a `tool` message answers an earlier tool call)."""

    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[ToolCallMessage] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def text(self, index: int) -> str:
        """The message's text (text parts joined); other part types are refused."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        texts = []
        for part in self.content:
            if part.type != "text" or part.text is None:
                raise bad_request(
                    f"message {index}: only text content parts are supported, got {part.type!r}",
                    f"messages.{index}.content",
                )
            texts.append(part.text)
        return "".join(texts)


class ChatCompletionRequest(SamplingFields):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0)
    tools: list[Any] | None = None
    """Function tools, checked into a `ToolPlan` (llmd/http/chat_tools.py)."""
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    prompt_logprobs: int | None = None
    """vLLM's extension; refused here (a templated prompt's logprobs): use /v1/completions."""

    def check_supported(self) -> None:
        """Also check top_logprobs against logprobs, and refuse prompt_logprobs."""
        super().check_supported()
        if self.prompt_logprobs is not None:
            raise bad_request(
                "prompt_logprobs is supported on /v1/completions only", "prompt_logprobs"
            )
        if self.top_logprobs is not None and not self.logprobs:
            raise bad_request("top_logprobs needs logprobs: true", "top_logprobs")


RequestT = TypeVar("RequestT", bound=SamplingFields)
"""The request model `parse_body` validates into (and returns)."""


def parse_body(model: type[RequestT], body: object) -> RequestT:
    """Validate a decoded JSON body; the first problem becomes a 400 naming its field."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object", None)
    try:
        request = model.model_validate(body)
    except ValidationError as error:
        raise first_problem(error) from None
    request.check_supported()
    return request


def first_problem(error: ValidationError) -> HttpError:
    """The first problem pydantic found, as a 400 naming its field."""
    problem = error.errors(include_url=False)[0]
    field = ".".join(str(part) for part in problem["loc"] if not _is_union_tag(part))
    return bad_request(f"{field}: {problem['msg']}", field or None)


def _is_union_tag(part: object) -> bool:
    """pydantic names the union member it tried (`str`, `list[int]`); not a field."""
    return isinstance(part, str) and ("[" in part or part in ("str", "int", "float", "bool"))
