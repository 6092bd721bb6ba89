"""POST /v1/completions: a prompt (text, token ids, or a batch of either) to text.

Each prompt of a batch gives `n` choices, each one daemon request, `index` = prompt * n +
choice; streamed chunks of different choices interleave as the daemon produces them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmd.client import Accepted, Finished, TokenDelta
from llmd.http import sse
from llmd.http.body import read_json
from llmd.http.context import HttpContext
from llmd.http.generation_group import GenerationGroup, PromptInput
from llmd.http.logprobs import completion_logprobs
from llmd.http.request_id import STATE_KEY
from llmd.http.request_models import CompletionRequest, parse_body
from llmd.http.responses import (
    client_gone,
    complete,
    finish_reason,
    new_id,
    now_s,
    start_stream,
    usage,
)
from llmd.http.sampling import completion_params, fan_out
from llmd.http.timings import completion_timings, finished_timings


async def create_completion(request: Request) -> Response:
    """The route."""
    context: HttpContext = request.app.state.context
    body = parse_body(CompletionRequest, await read_json(request, context.max_body_bytes))
    model = await context.check_model(body.model)
    params = completion_params(body)
    prompts: list[PromptInput] = [
        {"prompt": p} if isinstance(p, str) else {"prompt_token_ids": p} for p in body.prompts()
    ]
    inputs = fan_out(prompts, params, body.n)
    label = getattr(request.state, STATE_KEY, None)
    group = GenerationGroup(context.client, inputs, params, stream=body.stream, label=label)
    head = {
        "id": new_id("cmpl"),
        "object": "text_completion",
        "created": now_s(),
        "model": model.id,
    }
    wants_logprobs = body.logprobs is not None
    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        return await start_stream(
            group,
            lambda: _chunks(
                group, head, wants_logprobs, include_usage, body.n, body.return_timings
            ),
        )
    completions = await complete(request, group)
    if completions is None:
        return client_gone()
    choices = [
        {
            "index": index,
            "text": completion.text,
            "logprobs": (
                completion_logprobs(completion.logprobs or [], 0) if wants_logprobs else None
            ),
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
    text_offsets: dict[int, int] = {}
    usages: dict[int, dict[str, int]] = {}
    request_ids: dict[int, str] = {}
    extra = {"usage": None} if include_usage else {}
    while (item := await group.next()) is not None:
        index, event = item
        if isinstance(event, Accepted):
            request_ids[index] = event.request_id
        elif isinstance(event, TokenDelta):
            logprobs = None
            if wants_logprobs:
                offset = text_offsets.get(index, 0)
                logprobs = completion_logprobs(event.logprobs or [], offset)
                text_offsets[index] = offset + sum(len(e["token"]) for e in event.logprobs or [])
            choice = {"index": index, "text": event.text, "logprobs": logprobs}
            yield sse.event({**head, "choices": [{**choice, "finish_reason": None}], **extra})
        elif isinstance(event, Finished):
            usages[index] = event.usage
            choice = {"index": index, "text": "", "logprobs": None}
            choice["finish_reason"] = finish_reason(event.finish_reason)
            if wants_timings:
                choice["timings"] = finished_timings(request_ids.get(index), event)
            yield sse.event({**head, "choices": [choice], **extra})
    if include_usage:
        ordered = [usages[index] for index in sorted(usages)]
        yield sse.event({**head, "choices": [], "usage": usage(ordered, num_choices)})
