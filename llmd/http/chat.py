"""POST /v1/chat/completions: messages through the model's chat template to a reply.

The daemon applies the template (its text thread owns the tokenizer); here the reply is
shaped as a chat completion, or as chunks whose first delta carries the role. Each of
the `n` choices is one daemon request; streamed chunks of different choices interleave.
With tools, each choice's text goes through its own reply parser (`llmd/tools/`), which
turns calls into `tool_calls` and keeps their text out of `content`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from llmd.client import Completion, TokenDelta
from llmd.http.chat_messages import wire_messages
from llmd.http.chat_tools import tool_plan, with_tool_constraint
from llmd.http.generation_group import PromptInput
from llmd.http.generation_route import answer, read_body, response_head
from llmd.http.logprobs import chat_logprobs
from llmd.http.request_models import ChatCompletionRequest
from llmd.http.sampling import chat_params, fan_out
from llmd.tools.reply_delta import ContentDelta, ReplyDelta, ToolCallDelta
from llmd.tools.reply_parser import ReplyParser
from llmd.tools.tool_plan import ToolPlan


async def create_chat_completion(request: Request) -> Response:
    """The route."""
    body, model, structured_outputs = await read_body(request, ChatCompletionRequest)
    plan = tool_plan(body, model.tool_call_parser)
    params = chat_params(body, model.max_model_len, structured_outputs)
    params = with_tool_constraint(params, plan)
    prompt: PromptInput = {"messages": wire_messages(body.messages)}
    if plan is not None:
        prompt["tools"] = plan.template_tools()
    inputs = fan_out([prompt], params, body.n)
    object_name = "chat.completion.chunk" if body.stream else "chat.completion"
    head = response_head("chatcmpl", object_name, model.id)
    return await answer(request, body, inputs, params, head, ChatWording(body.logprobs, plan))


class ChatWording:
    """Chat choices: a message when whole; streamed, a role delta, then content deltas.

    With a tool plan, a choice's calls become `tool_calls` (whole, or as deltas: id and
    name first, then argument fragments) and its finish reason `tool_calls`.
    """

    def __init__(self, wants_logprobs: bool, plan: ToolPlan | None = None) -> None:
        self.wants_logprobs = wants_logprobs
        self.plan = plan
        self.parsers: dict[int, ReplyParser] = {}
        """Each streamed choice's parser, by choice index."""
        self.num_whole_calls: dict[int, int] = {}
        """Calls in each whole (not streamed) choice, by choice index."""

    def whole(self, index: int, completion: Completion) -> dict[str, object]:
        logprobs = chat_logprobs(completion.logprobs or []) if self.wants_logprobs else None
        message: dict[str, object] = {"role": "assistant", "content": completion.text}
        if self.plan is not None:
            reply = self.plan.new_parser(is_streaming=False).parse(completion.text)
            message["content"] = reply.content
            if reply.tool_calls:
                message["tool_calls"] = [call.to_openai() for call in reply.tool_calls]
            self.num_whole_calls[index] = len(reply.tool_calls)
        return {"index": index, "message": message, "logprobs": logprobs}

    def opening(self, index: int) -> dict[str, object] | None:
        return {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None}

    def delta(self, index: int, event: TokenDelta) -> dict[str, object] | None:
        logprobs = chat_logprobs(event.logprobs or []) if self.wants_logprobs else None
        if self.plan is None:
            return {"index": index, "delta": {"content": event.text}, "logprobs": logprobs}
        delta = _delta(self._parser(index).feed(event.text))
        if delta is None:
            return None  # held back (a tag or a call's start may be half written)
        return {"index": index, "delta": delta, "logprobs": logprobs}

    def closing(self, index: int) -> dict[str, object]:
        delta: dict[str, object] = {}
        if self.plan is not None:
            delta = _delta(self._parser(index).finish()) or {}
        return {"index": index, "delta": delta, "logprobs": None}

    def finish_reason(self, index: int, reason: str) -> str:
        parser = self.parsers.get(index)
        num_calls = self.num_whole_calls.get(index, 0)
        if parser is not None:
            num_calls += parser.num_sent_calls
        return "tool_calls" if num_calls > 0 and reason == "stop" else reason

    def _parser(self, index: int) -> ReplyParser:
        parser = self.parsers.get(index)
        if parser is None:
            assert self.plan is not None
            parser = self.parsers[index] = self.plan.new_parser(is_streaming=True)
        return parser


def _delta(deltas: list[ReplyDelta]) -> dict[str, object] | None:
    """One streamed `delta` of parser output: its content joined, its call pieces merged."""
    texts = [delta.text for delta in deltas if isinstance(delta, ContentDelta)]
    calls: list[ToolCallDelta] = []
    for delta in deltas:
        if not isinstance(delta, ToolCallDelta):
            continue
        if calls and calls[-1].index == delta.index:
            last = calls[-1]
            calls[-1] = ToolCallDelta(
                last.index, last.arguments + delta.arguments, last.id, last.name
            )
        else:
            calls.append(delta)
    result: dict[str, object] = {}
    if texts:
        result["content"] = "".join(texts)
    if calls:
        result["tool_calls"] = [call.to_openai() for call in calls]
    return result or None
