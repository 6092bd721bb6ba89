"""`chat_prompt_text`: a conversation with tools rendered by the model's chat template, or,
where the template ignores them, as plain turns (`tool_prompt.plain_messages`).

Whether a template supports tools is read from what it renders: the prompt must change
when tools are given and must show every earlier call and tool result; otherwise (or when
the template refuses the tool turns) the plain form is rendered instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmd.errors import InvalidParameterError
from llmd.tools.tool_prompt import plain_messages

Render = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], str]
"""The template: (messages, tools or None) -> prompt text; raises InvalidParameterError."""


def chat_prompt_text(
    render: Render,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    parser_name: str,
) -> str:
    """The prompt text of `messages` with `tools`, through the template when it can."""
    has_tool_turns = any(_is_tool_turn(message) for message in messages)
    if not tools and not has_tool_turns:
        return render(messages, None)
    native = _try_render(render, messages, tools or None)
    is_ignored = native is None or not _shows_tool_turns(native, messages)
    if native is None or is_ignored or (tools and native == _try_render(render, messages, None)):
        return render(plain_messages(messages, tools, parser_name), None)
    return native


def _try_render(
    render: Render, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> str | None:
    try:
        return render(messages, tools)
    except InvalidParameterError:
        return None


def _is_tool_turn(message: dict[str, Any]) -> bool:
    return message.get("role") == "tool" or bool(message.get("tool_calls"))


def _shows_tool_turns(text: str, messages: list[dict[str, Any]]) -> bool:
    """True when every earlier call's name and every tool result's text is in `text`."""
    for message in messages:
        if message.get("role") == "tool" and str(message.get("content") or "") not in text:
            return False
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if not isinstance(name, str) or name not in text:
                return False
    return True
