"""Tool calling for the offline `LLM.chat`: the same `ToolPlan` as the HTTP chat route.

One plan per call decides the prompt (tools through the chat template, or as plain text
where it ignores them), the constraint (a forced call: `required` or a named function) and
how replies are read (`auto`: the family's parser), so offline and served chats agree.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from llmd.engine.tokenizer import Tokenizer
from llmd.errors import InvalidParameterError
from llmd.outputs import RequestOutput
from llmd.sampling_params import SamplingParams
from llmd.tools.parser_choice import resolve_parser_name
from llmd.tools.tool_plan import ToolPlan


def offline_tool_plan(
    tokenizer: Tokenizer,
    tools: list[dict[str, Any]] | None,
    tool_choice: str | dict[str, Any] | None,
    parallel_tool_calls: bool | None,
    tool_call_parser: str,
) -> ToolPlan | None:
    """The plan of one `chat` call's tool arguments (None without tools or for `none`)."""
    parser_name = resolve_parser_name(tool_call_parser, tokenizer.chat_template_text)
    return ToolPlan.from_request(tools, tool_choice, parallel_tool_calls, parser_name)


def tool_prompt_ids(
    tokenizer: Tokenizer, messages: list[dict[str, Any]], plan: ToolPlan | None
) -> list[int]:
    """The prompt of one conversation, with the plan's tools when it has some."""
    if plan is None:
        return tokenizer.apply_chat_template(messages)
    return tokenizer.apply_chat_template(
        messages, tools=plan.template_tools(), tool_call_parser=plan.parser_name
    )


def with_forced_call(params: SamplingParams, plan: ToolPlan | None) -> SamplingParams:
    """`params` with the constraint that forces the call, when the plan forces one."""
    constraint = None if plan is None else plan.structured_outputs()
    if constraint is None:
        return params
    if params.structured_outputs is not None:
        raise InvalidParameterError(
            "a forced tool call (required or a named function) cannot be combined with "
            "another output constraint (structured_outputs)",
            "tool_choice",
        )
    return dataclasses.replace(params, structured_outputs=constraint)


def with_tool_calls(output: RequestOutput, plan: ToolPlan | None) -> RequestOutput:
    """`output` with its reply parsed into content and tool calls (unchanged without a plan)."""
    if plan is None:
        return output
    reply = plan.new_parser(is_streaming=False).parse(output.text)
    return dataclasses.replace(output, content=reply.content, tool_calls=list(reply.tool_calls))
