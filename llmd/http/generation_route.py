"""The flow both generation routes share: one group of daemon requests for a parsed body,
answered as one JSON object or as a stream of SSE chunks.

The routes differ only in how a choice is worded (`ChoiceWording`), so the event loop,
the finish reasons, the usage and the timings are written once and cannot drift apart.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmd.client import Accepted, Completion, Finished, TokenDelta
from llmd.http import sse
from llmd.http.body import read_json
from llmd.http.context import HttpContext, ServedModel
from llmd.http.generation_group import GenerationGroup, PromptInput
from llmd.http.request_id import STATE_KEY
from llmd.http.request_models import SamplingFields, parse_body
from llmd.http.responses import (
    client_gone,
    complete,
    finish_reason,
    new_id,
    now_s,
    start_stream,
    usage,
)
from llmd.http.structured_fields import checked_outputs
from llmd.http.timings import completion_timings, finished_timings

BodyT = TypeVar("BodyT", bound=SamplingFields)
"""The body class of a generation route (completions or chat)."""


class ChoiceWording(Protocol):
    """How a route words a choice; each method returns it without `finish_reason`."""

    def whole(self, index: int, completion: Completion) -> dict[str, object]:
        """The choice of a reply that is not streamed."""

    def opening(self, index: int) -> dict[str, object] | None:
        """A chunk to send once the daemon accepted the choice's request, or None."""

    def delta(self, index: int, event: TokenDelta) -> dict[str, object] | None:
        """The chunk carrying new output, or None when there is none to send yet."""

    def closing(self, index: int) -> dict[str, object]:
        """The last chunk of a choice, before its finish reason is added."""

    def finish_reason(self, index: int, reason: str) -> str:
        """The choice's finish reason, given the daemon's (`stop` or `length`)."""


async def read_body(
    request: Request, body_class: type[BodyT]
) -> tuple[BodyT, ServedModel, dict[str, Any] | None]:
    """The validated body of a generation request, the served model it may name, and its
    output constraint (wire form, grammar checked) or None."""
    context: HttpContext = request.app.state.context
    body = parse_body(body_class, await read_json(request, context.max_body_bytes))
    model = await context.check_model(body.model)
    return body, model, await checked_outputs(body)


def response_head(id_prefix: str, object_name: str, model_id: str) -> dict[str, object]:
    """The fields every reply and chunk of one response starts with."""
    return {"id": new_id(id_prefix), "object": object_name, "created": now_s(), "model": model_id}


async def answer(
    request: Request,
    body: SamplingFields,
    inputs: list[PromptInput],
    params: dict[str, object],
    head: dict[str, object],
    wording: ChoiceWording,
    prepare: Callable[[Completion], Completion] | None = None,
) -> Response:
    """Send `inputs` (one per choice) and answer with every choice, whole or streamed.

    `prepare` rewrites each whole completion first (completions' `max_tokens: 0`)."""
    context: HttpContext = request.app.state.context
    label = getattr(request.state, STATE_KEY, None)
    group = GenerationGroup(context.client, inputs, params, stream=body.stream, label=label)
    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        return await start_stream(
            group, lambda: _chunks(group, head, wording, include_usage, body.n, body.return_timings)
        )
    completions = await complete(request, group)
    if completions is None:
        return client_gone()
    if prepare is not None:
        completions = [prepare(completion) for completion in completions]
    choices = []
    for index, completion in enumerate(completions):
        choice = wording.whole(index, completion)
        choice["finish_reason"] = wording.finish_reason(
            index, finish_reason(completion.finish_reason)
        )
        if body.return_timings:
            choice["timings"] = completion_timings(completion)
        choices.append(choice)
    total = usage([c.usage for c in completions], body.n)
    return JSONResponse({**head, "choices": choices, "usage": total})


async def _chunks(
    group: GenerationGroup,
    head: dict[str, object],
    wording: ChoiceWording,
    include_usage: bool,
    num_choices: int,
    wants_timings: bool,
) -> AsyncIterator[bytes]:
    extra = {"usage": None} if include_usage else {}
    usages: dict[int, dict[str, int]] = {}
    request_ids: dict[int, str] = {}
    while (item := await group.next()) is not None:
        index, event = item
        choice: dict[str, object] | None = None
        if isinstance(event, Accepted):
            request_ids[index] = event.request_id
            choice = wording.opening(index)
            if choice is not None:
                choice["finish_reason"] = None
        elif isinstance(event, TokenDelta):
            choice = wording.delta(index, event)
            if choice is not None:
                choice["finish_reason"] = None
        elif isinstance(event, Finished):
            usages[index] = event.usage
            choice = wording.closing(index)
            choice["finish_reason"] = wording.finish_reason(
                index, finish_reason(event.finish_reason)
            )
            if wants_timings:
                choice["timings"] = finished_timings(request_ids.get(index), event)
        if choice is not None:
            yield sse.event({**head, "choices": [choice], **extra})
    if include_usage:
        ordered = [usages[index] for index in sorted(usages)]
        yield sse.event({**head, "choices": [], "usage": usage(ordered, num_choices)})
