"""Slash commands typed into the chat prompt: parsing and their help text.

Commands are parsed into plain values before anything happens, so a typo produces a typed
error naming what was wrong instead of being sent to the model as a prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmd.errors import InvalidParameterError

COMMAND_HELP = {
    "clear": "/clear: forget the conversation (the system prompt and settings stay)",
    "system": "/system TEXT: set the system prompt (/system alone removes it)",
    "set": "/set NAME VALUE: change a sampling setting, e.g. /set temperature 0.2 (/set lists)",
    "save": "/save FILE: write the conversation to FILE as plain text",
    "stats": "/stats: show the daemon's state and this conversation's totals",
    "help": "/help: list the commands and keys",
    "quit": "/quit: leave (also Ctrl+Q)",
}
"""Every command with its one-line help, in the order /help lists them."""
KEYS_HELP = (
    "Enter sends · Shift+Enter or Ctrl+J adds a line · Esc or Ctrl+C stops a reply · "
    "↑/↓ prompt history · Ctrl+Q quits"
)
"""The chat's keys, as the first notice and /help list them."""


@dataclass(frozen=True)
class ChatCommand:
    """A parsed slash command: its name and the rest of the line."""

    name: str
    argument: str = ""


def is_command(text: str) -> bool:
    """True for '/name ...'; '//...' is an escaped prompt that starts with a slash."""
    return text.startswith("/") and not text.startswith("//")


def unescape_prompt(text: str) -> str:
    """The prompt to send for a line that is not a command ('//x' sends '/x')."""
    return text[1:] if text.startswith("//") else text


def parse_command(text: str) -> ChatCommand:
    """Parse '/name argument'; unknown names raise InvalidParameterError naming 'command'."""
    if not is_command(text):
        raise InvalidParameterError(f"{text!r} is not a command (commands start with /)", "command")
    name, _, argument = text[1:].partition(" ")
    name = name.strip().lower()
    if name not in COMMAND_HELP:
        known = ", ".join(f"/{known}" for known in COMMAND_HELP)
        raise InvalidParameterError(f"unknown command /{name}; known: {known}", "command")
    argument = argument.strip()
    if name in ("clear", "stats", "help", "quit") and argument:
        raise InvalidParameterError(f"/{name} takes no argument, got {argument!r}", "command")
    if name == "set" and len(argument.split()) not in (0, 2):
        raise InvalidParameterError("use /set NAME VALUE, e.g. /set temperature 0.2", "command")
    if name == "save" and not argument:
        raise InvalidParameterError("use /save FILE, e.g. /save chat.txt", "command")
    return ChatCommand(name, argument)
