"""POST /v1/completions: a prompt (text, token ids, or a batch of either) to text.

Each prompt of a batch gives `n` choices, each one daemon request, `index` = prompt * n +
choice; streamed chunks of different choices interleave as the daemon produces them.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from llmd.client import Completion, TokenDelta
from llmd.http.generation_group import PromptInput
from llmd.http.generation_route import answer, read_body, response_head
from llmd.http.logprobs import completion_logprobs
from llmd.http.request_models import CompletionRequest
from llmd.http.sampling import completion_params, fan_out


async def create_completion(request: Request) -> Response:
    """The route."""
    body, model, structured_outputs = await read_body(request, CompletionRequest)
    params = completion_params(body, structured_outputs)
    prompts: list[PromptInput] = [
        {"prompt": p} if isinstance(p, str) else {"prompt_token_ids": p} for p in body.prompts()
    ]
    inputs = fan_out(prompts, params, body.n)
    head = response_head("cmpl", "text_completion", model.id)
    wording = CompletionWording(wants_logprobs=body.logprobs is not None)
    return await answer(request, body, inputs, params, head, wording)


class CompletionWording:
    """Text choices; streamed logprobs carry text offsets that run on across chunks."""

    def __init__(self, wants_logprobs: bool) -> None:
        self.wants_logprobs = wants_logprobs
        self.text_offsets: dict[int, int] = {}

    def whole(self, index: int, completion: Completion) -> dict[str, object]:
        logprobs = None
        if self.wants_logprobs:
            logprobs = completion_logprobs(completion.logprobs or [], 0)
        return {"index": index, "text": completion.text, "logprobs": logprobs}

    def opening(self, index: int) -> dict[str, object] | None:
        return None  # a completion stream has no role chunk

    def delta(self, index: int, event: TokenDelta) -> dict[str, object]:
        logprobs = None
        if self.wants_logprobs:
            offset = self.text_offsets.get(index, 0)
            logprobs = completion_logprobs(event.logprobs or [], offset)
            self.text_offsets[index] = offset + sum(len(e["token"]) for e in event.logprobs or [])
        return {"index": index, "text": event.text, "logprobs": logprobs}

    def closing(self, index: int) -> dict[str, object]:
        return {"index": index, "text": "", "logprobs": None}

    def finish_reason(self, index: int, reason: str) -> str:
        return reason
