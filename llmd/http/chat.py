"""POST /v1/chat/completions: messages through the model's chat template to a reply.

The daemon applies the template (its text thread owns the tokenizer); here the reply is
shaped as a chat completion, or as chunks whose first delta carries the role. Each of
the `n` choices is one daemon request; streamed chunks of different choices interleave.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmd.client import Accepted, Finished, TokenDelta
from llmd.http import sse
from llmd.http.body import read_json
from llmd.http.context import HttpContext
from llmd.http.generation_group import GenerationGroup
from llmd.http.logprobs import chat_logprobs
from llmd.http.request_id import STATE_KEY
from llmd.http.request_models import ChatCompletionRequest, parse_body
from llmd.http.responses import (
    client_gone,
    complete,
    finish_reason,
    new_id,
    now_s,
    start_stream,
    usage,
)
from llmd.http.sampling import chat_params, fan_out
from llmd.http.timings import completion_timings, finished_timings


async def create_chat_completion(request: Request) -> Response:
    """The route."""
    context: HttpContext = request.app.state.context
    body = parse_body(ChatCompletionRequest, await read_json(request, context.max_body_bytes))
    model = await context.check_model(body.model)
    params = chat_params(body, model.max_model_len)
    inputs = fan_out([{"messages": body.wire_messages()}], params, body.n)
    label = getattr(request.state, STATE_KEY, None)
    group = GenerationGroup(context.client, inputs, params, stream=body.stream, label=label)
    head = {
        "id": new_id("chatcmpl"),
        "object": "chat.completion",
        "created": now_s(),
        "model": model.id,
    }
    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        head["object"] = "chat.completion.chunk"
        return await start_stream(
            group,
            lambda: _chunks(group, head, body.logprobs, include_usage, body.n, body.return_timings),
        )
    completions = await complete(request, group)
    if completions is None:
        return client_gone()
    choices = [
        {
            "index": index,
            "message": {"role": "assistant", "content": completion.text},
            "logprobs": chat_logprobs(completion.logprobs or []) if body.logprobs else None,
            "finish_reason": finish_reason(completion.finish_reason),
            **({"timings": completion_timings(completion)} if body.return_timings else {}),
        }
        for index, completion in enumerate(completions)
    ]
    total = usage([c.usage for c in completions], body.n)
    return JSONResponse({**head, "choices": choices, "usage": total})


async def _chunks(
    group: GenerationGroup,
    head: dict[str, object],
    wants_logprobs: bool,
    include_usage: bool,
    num_choices: int,
    wants_timings: bool,
) -> AsyncIterator[bytes]:
    extra = {"usage": None} if include_usage else {}

    def chunk(
        index: int,
        delta: dict[str, object],
        logprobs: dict[str, object] | None = None,
        reason: str | None = None,
        timings: dict[str, object] | None = None,
    ) -> bytes:
        choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": reason}
        if timings is not None:
            choice["timings"] = timings
        return sse.event({**head, "choices": [choice], **extra})

    usages: dict[int, dict[str, int]] = {}
    request_ids: dict[int, str] = {}
    while (item := await group.next()) is not None:
        index, event = item
        if isinstance(event, Accepted):
            request_ids[index] = event.request_id
            yield chunk(index, {"role": "assistant", "content": ""})
        elif isinstance(event, TokenDelta):
            logprobs = chat_logprobs(event.logprobs or []) if wants_logprobs else None
            yield chunk(index, {"content": event.text}, logprobs)
        elif isinstance(event, Finished):
            usages[index] = event.usage
            timings = finished_timings(request_ids.get(index), event) if wants_timings else None
            yield chunk(index, {}, None, finish_reason(event.finish_reason), timings)
    if include_usage:
        ordered = [usages[index] for index in sorted(usages)]
        yield sse.event({**head, "choices": [], "usage": usage(ordered, num_choices)})
