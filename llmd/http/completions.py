"""POST /v1/completions: a prompt (text, token ids, or a batch of either) to text.

Each prompt of a batch gives `n` choices, each one daemon request, `index` = prompt * n +
choice; streamed chunks of different choices interleave as the daemon produces them.
With `echo` the prompt comes first (text and logprobs); `max_tokens: 0` answers with the
echoed prompt alone (one token is sampled and dropped), as OpenAI and vLLM do.
"""

from __future__ import annotations

import dataclasses

from starlette.requests import Request
from starlette.responses import Response

from llmd.client import Completion, TokenDelta
from llmd.http.generation_group import PromptInput
from llmd.http.generation_route import answer, read_body, response_head
from llmd.http.logprobs import completion_logprobs
from llmd.http.prompt_logprobs import echoed_logprobs, vllm_prompt_logprobs
from llmd.http.request_models import CompletionRequest
from llmd.http.sampling import completion_params, fan_out
from llmd.protocol import LogprobEntry


async def create_completion(request: Request) -> Response:
    """The route."""
    body, model, structured_outputs = await read_body(request, CompletionRequest)
    params = completion_params(body, structured_outputs)
    prompts: list[PromptInput] = [
        {"prompt": p} if isinstance(p, str) else {"prompt_token_ids": p} for p in body.prompts()
    ]
    if body.echo:
        for prompt in prompts:
            prompt["echo"] = True
    inputs = fan_out(prompts, params, body.n)
    head = response_head("cmpl", "text_completion", model.id)
    is_prompt_only = body.max_tokens == 0
    wording = CompletionWording(
        wants_logprobs=body.logprobs is not None,
        is_echo=body.echo,
        wants_prompt_logprobs=body.prompt_logprobs is not None,
        is_prompt_only=is_prompt_only,
    )
    prepare = without_generated if is_prompt_only else None
    return await answer(request, body, inputs, params, head, wording, prepare)


def without_generated(completion: Completion) -> Completion:
    """A `max_tokens: 0` answer: the one sampled token dropped, from the usage too."""
    return dataclasses.replace(
        completion,
        text="",
        token_ids=[],
        logprobs=[],
        finish_reason="length",
        usage={**completion.usage, "completion_tokens": 0},
    )


class CompletionWording:
    """Text choices; streamed logprobs carry text offsets that run on across chunks."""

    def __init__(
        self,
        wants_logprobs: bool,
        is_echo: bool = False,
        wants_prompt_logprobs: bool = False,
        is_prompt_only: bool = False,
    ) -> None:
        self.wants_logprobs = wants_logprobs
        self.is_echo = is_echo
        self.wants_prompt_logprobs = wants_prompt_logprobs
        self.is_prompt_only = is_prompt_only
        self.text_offsets: dict[int, int] = {}

    def whole(self, index: int, completion: Completion) -> dict[str, object]:
        return self._choice(
            index,
            completion.text,
            completion.logprobs or [],
            0,
            completion.prompt_text,
            completion.prompt_tokens,
            completion.prompt_logprobs,
        )

    def opening(self, index: int) -> dict[str, object] | None:
        return None  # a completion stream has no role chunk

    def delta(self, index: int, event: TokenDelta) -> dict[str, object]:
        offset = self.text_offsets.get(index, 0)
        choice = self._choice(
            index,
            event.text,
            event.logprobs or [],
            offset,
            event.prompt_text,
            event.prompt_tokens,
            event.prompt_logprobs,
        )
        echoed = len(event.prompt_text or "") if self.is_echo else 0
        generated = sum(len(entry["token"]) for entry in event.logprobs or [])
        self.text_offsets[index] = offset + echoed + generated
        return choice

    def closing(self, index: int) -> dict[str, object]:
        return {"index": index, "text": "", "logprobs": None}

    def finish_reason(self, index: int, reason: str) -> str:
        return "length" if self.is_prompt_only else reason

    def _choice(
        self,
        index: int,
        text: str,
        entries: list[LogprobEntry],
        text_offset: int,
        prompt_text: str | None,
        prompt_tokens: list[str] | None,
        prompt_entries: list[LogprobEntry | None] | None,
    ) -> dict[str, object]:
        """One choice; the prompt part only where the message carries the prompt fields."""
        is_echoed = self.is_echo and prompt_text is not None
        if is_echoed:
            text = (prompt_text or "") + text
            text_offset += len(prompt_text or "")
        logprobs: dict[str, list[object]] | None = None
        if self.wants_logprobs:
            logprobs = completion_logprobs(entries, text_offset)  # type: ignore[assignment]
            if is_echoed and logprobs is not None:
                prompt_part = echoed_logprobs(prompt_tokens or [], prompt_entries or [])
                logprobs = {key: prompt_part[key] + logprobs[key] for key in prompt_part}
        choice: dict[str, object] = {"index": index, "text": text, "logprobs": logprobs}
        if self.wants_prompt_logprobs and prompt_entries is not None:
            choice["prompt_logprobs"] = vllm_prompt_logprobs(prompt_entries)
        return choice
