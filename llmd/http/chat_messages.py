"""A chat request's messages as the daemon's chat template takes them (transformers' shape).

Earlier tool calls keep their ids and get their arguments as a map (what templates write
with `tojson`), and a tool result gets the name of the call it answers; each problem is a
400 naming the message's field, before anything reaches the daemon.
"""

from __future__ import annotations

import json

from llmd.http.errors import bad_request
from llmd.http.request_models import ChatMessage

_ROLES = {"developer": "system"}
"""Roles the daemon knows by another name."""


def wire_messages(messages: list[ChatMessage]) -> list[dict[str, object]]:
    """The conversation for the daemon's `messages`: roles, text, tool calls and results."""
    call_names: dict[str, str] = {}
    wired: list[dict[str, object]] = []
    for index, message in enumerate(messages):
        entry: dict[str, object] = {
            "role": _ROLES.get(message.role, message.role),
            "content": message.text(index),
        }
        if message.tool_calls:
            if message.role != "assistant":
                raise bad_request(
                    f"message {index}: only assistant messages carry tool calls",
                    f"messages.{index}.tool_calls",
                )
            entry["tool_calls"] = _wire_calls(message, index, call_names)
        if message.role == "tool":
            entry.update(_tool_result(message, index, call_names))
        wired.append(entry)
    return wired


def _wire_calls(
    message: ChatMessage, index: int, call_names: dict[str, str]
) -> list[dict[str, object]]:
    calls: list[dict[str, object]] = []
    for number, call in enumerate(message.tool_calls or []):
        field = f"messages.{index}.tool_calls.{number}.function.arguments"
        arguments = call.function.arguments
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError as error:
                raise bad_request(f"is not valid JSON: {error}", field) from None
        if not isinstance(arguments, dict):
            raise bad_request("must be a JSON object", field)
        wired: dict[str, object] = {
            "type": "function",
            "function": {"name": call.function.name, "arguments": arguments},
        }
        if call.id is not None:
            wired["id"] = call.id
            call_names[call.id] = call.function.name
        calls.append(wired)
    return calls


def _tool_result(message: ChatMessage, index: int, call_names: dict[str, str]) -> dict[str, str]:
    if not message.tool_call_id:
        raise bad_request(
            f"message {index}: a tool message needs the tool_call_id it answers",
            f"messages.{index}.tool_call_id",
        )
    result = {"tool_call_id": message.tool_call_id}
    name = message.name or call_names.get(message.tool_call_id)
    if name is not None:
        result["name"] = name
    return result
