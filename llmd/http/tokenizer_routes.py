"""POST /tokenize and /detokenize, vLLM's routes, answered by the daemon's tokenizer.

The front end imports no model code and holds no tokenizer, so both ask the daemon; the
shapes are vLLM's: {prompt | messages, add_special_tokens} -> {count, max_model_len,
tokens}, and {tokens} -> {prompt}.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from llmd.errors import InvalidParameterError
from llmd.http.body import read_json
from llmd.http.chat_messages import wire_messages
from llmd.http.context import HttpContext
from llmd.http.errors import bad_request
from llmd.http.request_models import ChatMessage, first_problem

BodyT = TypeVar("BodyT", bound=BaseModel)


class TokenizeBody(BaseModel):
    """A prompt, or chat messages rendered by the chat template (which writes its own BOS)."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = Field(default=None, min_length=1)
    add_special_tokens: bool = True


class DetokenizeBody(BaseModel):
    """Token ids to turn back into text."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    tokens: list[int]


async def tokenize(request: Request) -> Response:
    """The /tokenize route."""
    context: HttpContext = request.app.state.context
    body = _parse(TokenizeBody, await read_json(request, context.max_body_bytes))
    await context.check_model(body.model)
    if (body.prompt is None) == (body.messages is None):
        raise bad_request("give exactly one of prompt or messages", "prompt")
    messages = None if body.messages is None else wire_messages(body.messages)
    reply = await context.client.tokenize(body.prompt, messages, body.add_special_tokens)
    return JSONResponse(
        {
            "count": len(reply.token_ids),
            "max_model_len": reply.max_model_len,
            "tokens": reply.token_ids,
        }
    )


async def detokenize(request: Request) -> Response:
    """The /detokenize route."""
    context: HttpContext = request.app.state.context
    body = _parse(DetokenizeBody, await read_json(request, context.max_body_bytes))
    await context.check_model(body.model)
    for token_id in body.tokens:
        if token_id < 0:
            raise bad_request(f"token id {token_id} is negative", "tokens")
    try:
        text = await context.client.detokenize(body.tokens)
    except InvalidParameterError as error:  # the daemon names its wire field, token_ids
        raise bad_request(error.message, "tokens") from None
    return JSONResponse({"prompt": text})


def _parse(model: type[BodyT], body: object) -> BodyT:
    """The validated body; the first problem becomes a 400 naming its field."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object", None)
    try:
        return model.model_validate(body)
    except ValidationError as error:
        raise first_problem(error) from None


TOKENIZER_ROUTES = [
    Route("/tokenize", tokenize, methods=["POST"]),
    Route("/detokenize", detokenize, methods=["POST"]),
]
"""Both routes, for the app's route list."""
