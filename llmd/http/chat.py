"""POST /v1/chat/completions: messages through the model's chat template to a reply.

The daemon applies the template (its text thread owns the tokenizer); here the reply is
shaped as a chat completion, or as chunks whose first delta carries the role. Each of
the `n` choices is one daemon request; streamed chunks of different choices interleave.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from llmd.client import Completion, TokenDelta
from llmd.http.generation_route import answer, read_body, response_head
from llmd.http.logprobs import chat_logprobs
from llmd.http.request_models import ChatCompletionRequest
from llmd.http.sampling import chat_params, fan_out


async def create_chat_completion(request: Request) -> Response:
    """The route."""
    body, model, structured_outputs = await read_body(request, ChatCompletionRequest)
    params = chat_params(body, model.max_model_len, structured_outputs)
    inputs = fan_out([{"messages": body.wire_messages()}], params, body.n)
    object_name = "chat.completion.chunk" if body.stream else "chat.completion"
    head = response_head("chatcmpl", object_name, model.id)
    return await answer(request, body, inputs, params, head, ChatWording(body.logprobs))


class ChatWording:
    """Chat choices: a message when whole; streamed, a role delta, then content deltas."""

    def __init__(self, wants_logprobs: bool) -> None:
        self.wants_logprobs = wants_logprobs

    def whole(self, index: int, completion: Completion) -> dict[str, object]:
        logprobs = chat_logprobs(completion.logprobs or []) if self.wants_logprobs else None
        message = {"role": "assistant", "content": completion.text}
        return {"index": index, "message": message, "logprobs": logprobs}

    def opening(self, index: int) -> dict[str, object] | None:
        return {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None}

    def delta(self, index: int, event: TokenDelta) -> dict[str, object]:
        logprobs = chat_logprobs(event.logprobs or []) if self.wants_logprobs else None
        return {"index": index, "delta": {"content": event.text}, "logprobs": logprobs}

    def closing(self, index: int) -> dict[str, object]:
        return {"index": index, "delta": {}, "logprobs": None}
