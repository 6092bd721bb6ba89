"""Which parser reads a model's free-form tool calls: `--tool-call-parser`, or by family.

`auto` looks at the chat template, the one place that says how the model was taught to
write calls: a template that writes `<tool_call>` tags is Hermes-style (Qwen2.5, Qwen3), one
that knows `<|python_tag|>` or the `ipython` role is Llama 3.x; any other falls back to
Hermes, the format of the system prompt llmd writes for templates that ignore tools.
"""

from __future__ import annotations

from llmd.errors import require
from llmd.tools.forced_call_parser import CallArrayParser, NamedCallParser
from llmd.tools.hermes_parser import HermesParser
from llmd.tools.llama3_parser import PYTHON_TAG, Llama3Parser
from llmd.tools.reply_parser import ReplyParser
from llmd.tools.tool_choice import ToolChoice

PARSERS: dict[str, type[ReplyParser]] = {"hermes": HermesParser, "llama3": Llama3Parser}
"""Free-form parsers by `--tool-call-parser` name."""
PARSER_OPTIONS = ("auto", *PARSERS)
DEFAULT_PARSER = "hermes"


def resolve_parser_name(option: str, chat_template: str | None) -> str:
    """The parser `option` names; for `auto`, the one `chat_template`'s format calls for."""
    require(
        option in PARSER_OPTIONS,
        "tool_call_parser",
        f"must be one of {', '.join(PARSER_OPTIONS)}, got {option!r}",
    )
    if option != "auto":
        return option
    template = chat_template or ""
    if "<tool_call>" in template:
        return "hermes"
    if PYTHON_TAG in template or "ipython" in template:
        return "llama3"
    return DEFAULT_PARSER


def new_reply_parser(
    parser_name: str,
    choice: ToolChoice,
    is_streaming: bool,
    tool_names: frozenset[str] | None = None,
) -> ReplyParser:
    """The parser of one reply: the forced formats when the grammar forced a call."""
    if choice.mode == "named" and choice.name is not None:
        return NamedCallParser(choice.name, is_streaming)
    if choice.mode == "required":
        return CallArrayParser(is_streaming, tool_names)
    return PARSERS[parser_name](is_streaming, tool_names)
