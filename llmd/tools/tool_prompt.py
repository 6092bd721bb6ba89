"""The tools and tool turns written as plain text, for chat templates that ignore them.

A template without tool support drops `tools=` and the calls of earlier turns, so the model
would never learn what it may call; written into a system message and ordinary turns, in
the format the served parser reads, the tools still reach it.
"""

from __future__ import annotations

import json
from typing import Any

RESPONSE_OPEN, RESPONSE_CLOSE = "<tool_response>", "</tool_response>"

_HOW_TO_CALL = {
    "hermes": (
        "To call a function, answer with one tag per call, each holding a JSON object with "
        'the function\'s name and its arguments:\n<tool_call>\n{"name": "NAME", "arguments": '
        "{...}}\n</tool_call>"
    ),
    "llama3": (
        "To call a function, answer with only a JSON object holding the function's name and "
        'its arguments, {"name": "NAME", "parameters": {...}}; separate several calls with ";".'
    ),
}


def tools_system_text(tools: list[dict[str, Any]], parser_name: str) -> str:
    """A system prompt that lists `tools` and says how to call them, for `parser_name`."""
    definitions = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return (
        "You may call functions to help with the user's request. Their definitions, one JSON "
        f"object per line:\n<tools>\n{definitions}\n</tools>\n{_HOW_TO_CALL[parser_name]}\n"
        f"Each result comes back in {RESPONSE_OPEN}{RESPONSE_CLOSE} tags."
    )


def plain_messages(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, parser_name: str
) -> list[dict[str, str]]:
    """`messages` with only system, user and assistant text turns (tools in the system one).

    An assistant's calls are written after its text as the parser reads them; consecutive
    tool results become one user turn of `<tool_response>` blocks.
    """
    plain: list[dict[str, str]] = []
    is_after_tool = False
    for message in messages:
        role, content = message.get("role"), message.get("content") or ""
        if role == "tool":
            block = f"{RESPONSE_OPEN}\n{content}\n{RESPONSE_CLOSE}"
            if is_after_tool:
                plain[-1]["content"] += "\n" + block
            else:
                plain.append({"role": "user", "content": block})
            is_after_tool = True
            continue
        is_after_tool = False
        calls = message.get("tool_calls") or []
        if role == "assistant" and calls:
            written = _written_calls(calls, parser_name)
            content = f"{content}\n{written}" if content else written
        plain.append({"role": str(role), "content": str(content)})
    if tools:
        text = tools_system_text(tools, parser_name)
        if plain and plain[0]["role"] == "system":
            plain[0] = {"role": "system", "content": f"{plain[0]['content']}\n\n{text}"}
        else:
            plain.insert(0, {"role": "system", "content": text})
    return plain


def _written_calls(calls: list[Any], parser_name: str) -> str:
    objects = []
    for call in calls:
        function = call.get("function", {}) if isinstance(call, dict) else {}
        arguments_key = "parameters" if parser_name == "llama3" else "arguments"
        body = {"name": function.get("name"), arguments_key: function.get("arguments", {})}
        objects.append(json.dumps(body, ensure_ascii=False))
    if parser_name == "llama3":
        return ";".join(objects)
    return "\n".join(f"<tool_call>\n{text}\n</tool_call>" for text in objects)
