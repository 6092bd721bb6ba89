"""The offline API: `LLM(model).generate(prompts, params)` and `LLM.chat(conversations)`.

It drives the same engine step loop as the daemon, with a list of prompts at one end and
a list of outputs (or a stream of text deltas) at the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from llmd.config import EngineConfig
from llmd.engine.detokenizer import DetokenizerDelta, IncrementalDetokenizer
from llmd.engine.request import FinishReason, Request
from llmd.engine.text_stream import Detokenizer, TextStream, is_ended_on_token
from llmd.errors import InvalidParameterError
from llmd.llm_engine import LLMEngine
from llmd.offline_tools import offline_tool_plan, tool_prompt_ids, with_forced_call, with_tool_calls
from llmd.outputs import RequestMetrics, RequestOutput, TokenLogprob
from llmd.protocol.errors import RequestFailedError
from llmd.sampling_params import SamplingParams

Prompt = str | list[int]
Message = dict[str, Any]
"""A chat turn: role and content; an assistant's `tool_calls`, a tool's `tool_call_id`."""


@dataclass
class StreamDelta:
    """A piece of one request's output as it is produced."""

    index: int
    """Position of the request in the input list."""
    text: str
    token_ids: list[int]
    output: RequestOutput | None = None
    """Set on the last delta of a request, when it has finished."""


class _Tracked:
    """A live request with its prompt text, text stream and logprobs."""

    def __init__(
        self, index: int, prompt: str | None, request: Request, detok: Detokenizer
    ) -> None:
        self.index = index
        self.prompt = prompt
        self.request = request
        self.text = TextStream(detok)
        self.logprobs: list[TokenLogprob] | None = (
            [] if request.sampling_params.logprobs is not None else None
        )


class LLM:
    """Offline batch generation over one engine instance."""

    def __init__(self, model: str | None = None, **engine_options: Any) -> None:
        self.engine = LLMEngine(EngineConfig.from_kwargs(model=model, **engine_options))

    @property
    def tokenizer(self):
        """The model's tokenizer wrapper; an error when the engine was built without one."""
        if self.engine.tokenizer is None:
            raise InvalidParameterError(
                "this engine has no tokenizer (skip_tokenizer_init): pass token ids",
                "skip_tokenizer_init",
            )
        return self.engine.tokenizer

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Generate for every prompt (text or token ids); outputs come in input order."""
        outputs: list[RequestOutput | None] = []
        for delta in self.stream(prompts, params):
            if delta.output is not None:
                outputs.extend([None] * (delta.index + 1 - len(outputs)))
                outputs[delta.index] = delta.output
        return [output for output in outputs if output is not None]

    def chat(
        self,
        conversations: Sequence[Message] | Sequence[Sequence[Message]],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        parallel_tool_calls: bool | None = None,
        tool_call_parser: str = "auto",
    ) -> list[RequestOutput]:
        """Apply the tokenizer's chat template to each conversation and generate replies.

        With `tools` (OpenAI's function-tool maps) and `tool_choice` (none, auto, required
        or `{"type": "function", "function": {"name": ...}}`), each output's `tool_calls`
        holds the parsed calls: a forced choice is grammar-enforced, `auto` is parsed by
        the model family's format (`tool_call_parser`: auto, hermes or llama3).
        """
        if conversations and isinstance(conversations[0], dict):
            conversations = [conversations]  # type: ignore[list-item]
        tokenizer = self.tokenizer
        plan = offline_tool_plan(
            tokenizer, tools, tool_choice, parallel_tool_calls, tool_call_parser
        )
        prompts: list[Prompt] = [
            tool_prompt_ids(tokenizer, list(c), plan)  # type: ignore[arg-type]
            for c in conversations
        ]
        params_list = [with_forced_call(p, plan) for p in _normalize_params(params, len(prompts))]
        outputs = self.generate(prompts, params_list)
        return [with_tool_calls(output, plan) for output in outputs]

    def stream(
        self,
        prompts: Prompt | Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        on_step: Callable[[Any], None] | None = None,
    ) -> Iterator[StreamDelta]:
        """Yield text deltas of all prompts as the engine produces them."""
        prompt_list = _normalize_prompts(prompts)
        params_list = _normalize_params(params, len(prompt_list))
        live = self._add_all(prompt_list, params_list)
        try:
            while live:
                result = self.engine.step()
                if on_step is not None and result.stats is not None:
                    on_step(result.stats)
                for update in result.updates:
                    tracked = live.get(update.request.request_id)
                    if tracked is None:
                        continue
                    delta = self._advance(tracked, update)
                    if delta.output is not None:
                        del live[update.request.request_id]
                    if delta.text or delta.token_ids or delta.output is not None:
                        yield delta
        finally:
            for request_id in list(live):  # an abandoned iterator must not leak KV blocks
                self.engine.abort_request(request_id)

    def _add_all(
        self, prompts: list[Prompt], params_list: list[SamplingParams]
    ) -> dict[str, _Tracked]:
        live: dict[str, _Tracked] = {}
        try:
            tokenizer = self.engine.tokenizer
            for index, (prompt, params) in enumerate(zip(prompts, params_list)):
                text = prompt if isinstance(prompt, str) else None
                if tokenizer is None:
                    _require_token_ids_only(prompt, params)
                token_ids = tokenizer.encode(prompt) if isinstance(prompt, str) else prompt
                request = self.engine.add_request(list(token_ids), params)
                detok = (
                    _NoTextDetokenizer()
                    if tokenizer is None
                    else IncrementalDetokenizer(
                        tokenizer, request.prompt_token_ids, params.skip_special_tokens, params.stop
                    )
                )
                live[request.request_id] = _Tracked(index, text, request, detok)
        except Exception:
            for request_id in live:
                self.engine.abort_request(request_id)
            raise
        return live

    def _advance(self, tracked: _Tracked, update) -> StreamDelta:
        request = tracked.request
        step = tracked.text.advance(
            update.new_token_ids,
            request.is_finished,
            is_ended_on_token(request.finish_reason, request.stop_reason),
        )
        new_token_ids = update.new_token_ids[: step.num_tokens_kept]
        if tracked.logprobs is not None and update.new_logprobs:
            tracked.logprobs.extend(update.new_logprobs[: step.num_tokens_kept])
        if step.stop_string is not None:
            # Tokens after the stop string's (a speculative run's) were never delivered.
            num_delivered = request.num_output_tokens - (
                len(update.new_token_ids) - len(new_token_ids)
            )
            if request.is_finished:
                request.keep_output_tokens(num_delivered)
            else:
                self.engine.finish_request(
                    request.request_id, FinishReason.STOP, step.stop_string, num_delivered
                )
        if request.finish_reason is FinishReason.ERROR:
            raise RequestFailedError(request.error_message or "the engine failed this request")
        output = self._output(tracked) if request.is_finished else None
        return StreamDelta(tracked.index, step.text, new_token_ids, output)

    def _output(self, tracked: _Tracked) -> RequestOutput:
        request = tracked.request
        assert request.finish_reason is not None  # set by finish(); internal invariant
        finish_reason, stop_reason = tracked.text.final_reasons(
            request.finish_reason.value, request.stop_reason
        )
        return RequestOutput(
            request_id=request.request_id,
            prompt=tracked.prompt,
            prompt_token_ids=request.prompt_token_ids,
            token_ids=request.output_token_ids,
            text=tracked.text.text,
            finish_reason=finish_reason,
            stop_reason=stop_reason,
            metrics=RequestMetrics.from_request(request),
            logprobs=tracked.logprobs,
            prompt_logprobs=request.prompt_logprobs,
        )


class _NoTextDetokenizer:
    """Stands in for the detokenizer when the engine has no tokenizer: ids flow, text is ""."""

    output_text = ""

    def update(self, new_token_ids: list[int], exclude_last: bool = False) -> DetokenizerDelta:
        """No text for any tokens."""
        return DetokenizerDelta("")

    def flush(self) -> str:
        """Nothing is ever held back."""
        return ""


def _require_token_ids_only(prompt: Prompt, params: SamplingParams) -> None:
    """Refuse what needs a tokenizer on an engine built with skip_tokenizer_init."""
    if isinstance(prompt, str):
        raise InvalidParameterError(
            "this engine has no tokenizer (skip_tokenizer_init): give prompts as token ids",
            "prompts",
        )
    if params.stop:
        raise InvalidParameterError(
            "stop strings need a tokenizer and this engine has none (skip_tokenizer_init): "
            "use stop_token_ids",
            "stop",
        )


def _normalize_prompts(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    if isinstance(prompts, str):
        return [prompts]
    if not isinstance(prompts, Sequence) or len(prompts) == 0:
        raise InvalidParameterError("give a prompt or a non-empty list of prompts", "prompts")
    if all(isinstance(item, int) and not isinstance(item, bool) for item in prompts):
        return [list(prompts)]  # type: ignore[arg-type]
    for item in prompts:
        is_ids = isinstance(item, list) and all(isinstance(t, int) for t in item)
        if not isinstance(item, str) and not is_ids:
            raise InvalidParameterError(
                "each prompt must be a string or a list of token ids", "prompts"
            )
    return list(prompts)  # type: ignore[arg-type]


def _normalize_params(
    params: SamplingParams | Sequence[SamplingParams] | None, num_prompts: int
) -> list[SamplingParams]:
    if params is None:
        return [SamplingParams()] * num_prompts
    if isinstance(params, SamplingParams):
        return [params] * num_prompts
    params_list = list(params)
    if len(params_list) != num_prompts:
        raise InvalidParameterError(
            f"got {len(params_list)} sampling params for {num_prompts} prompts", "params"
        )
    return params_list
