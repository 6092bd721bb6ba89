"""`llmd chat` and `llmd top`: the terminal clients of a running daemon.

Registered into the `llmd` group by llmd.cli; only click is imported at module scope and
the apps import Textual and the client, never torch, so both start in well under a second.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from llmd.cli_options import apply_options
from llmd.commands.cli_group import cli_error
from llmd.commands.help_text import ADDRESS_DEFAULT, ADDRESS_HELP
from llmd.option_spec import Flag, click_option
from llmd.sampling_params import SamplingParams
from llmd.tui.chat.settings import DEFAULT_CHAT_PARAMS
from llmd.tui.top.top_settings import TopSettings

if TYPE_CHECKING:
    from llmd.sampling_params import SamplingParams

CHAT_CHECK_TIMEOUT_S = 3.0
"""How long `llmd chat` waits for the daemon's health reply before giving up."""
CHAT_SAMPLING_FLAGS = (
    Flag(
        "temperature",
        short_names=("-t",),
        default=DEFAULT_CHAT_PARAMS.temperature,
        help="Sampling temperature (0: greedy).",
    ),
    Flag("top_p", default=DEFAULT_CHAT_PARAMS.top_p, help="Nucleus sampling mass (1: off)."),
    Flag(
        "max_tokens",
        default=DEFAULT_CHAT_PARAMS.max_tokens,
        help="Most tokens per reply (capped by the model's context).",
    ),
    Flag("seed", flag_name="--sampling-seed", help="Per-request seed for reproducible replies."),
)
"""The sampling flags of `llmd chat`, typed from SamplingParams, defaulted from the chat's."""


def register(main: click.Group) -> None:
    """Add the terminal-app commands to the `llmd` group."""
    main.add_command(chat)
    main.add_command(top)


@click.command(
    epilog="""\b
Examples:
  llmd chat                                  # interactive
  llmd chat -p "Name three colours."         # one reply on stdout, for scripts
  echo "Hi" | llmd chat --stats              # the prompt from stdin; timings on stderr
  llmd chat --system "Answer in French." --temperature 0.2 --print-transcript
"""
)
@click.option("--address", default=None, show_default=ADDRESS_DEFAULT, help=ADDRESS_HELP)
@click.option(
    "-p", "--prompt", default=None, help="Ask one question, print the reply to stdout, exit."
)
@click.option("--system", "system_prompt", default=None, help="System prompt (none unless given).")
@apply_options([click_option(SamplingParams, flag) for flag in CHAT_SAMPLING_FLAGS])
@click.option("--stats", is_flag=True, help="One-shot: print the reply's stats to stderr.")
@click.option(
    "--print-transcript",
    is_flag=True,
    help="Interactive: print the conversation to stdout on exit.",
)
def chat(address: str | None, prompt: str | None, system_prompt: str | None, stats: bool,
         print_transcript: bool, **settings: Any) -> None:  # fmt: skip
    """Chat with the daemon's model (one-shot with -p or when stdin is not a terminal).

    \b
    Keys: Enter sends, Shift+Enter or Ctrl+J starts a new line, Esc or Ctrl+C stops a
    reply, Up/Down browse prompts, Ctrl+Q quits.
    Commands: /clear, /system TEXT, /set [NAME VALUE], /save FILE, /stats, /help, /quit.
    """
    from llmd.client import Client, DaemonNotRunningError
    from llmd.commands.daemon_files import raise_if_crashed
    from llmd.commands.generate import require_utf8
    from llmd.errors import LLMDError
    from llmd.protocol import default_address

    address = address or default_address()
    try:
        params = _chat_params(settings)
    except LLMDError as error:
        raise cli_error(error) from None
    if prompt is None and not sys.stdin.isatty():
        prompt = require_utf8(sys.stdin.read(), "stdin").strip()
        if not prompt:
            raise click.ClickException("stdin was empty")
    if prompt is not None:
        require_utf8(prompt, "the prompt")
    raise_if_crashed(address)
    if prompt is not None:
        from llmd.tui.chat.oneshot import run_once

        with Client(address) as client:
            code = run_once(
                client, prompt, params, sys.stdout, sys.stderr, system_prompt, show_stats=stats
            )
        sys.exit(code)
    try:
        with Client(address, timeout=CHAT_CHECK_TIMEOUT_S) as client:
            client.health()
    except DaemonNotRunningError as error:
        raise cli_error(error) from None
    from llmd.client import AsyncClient
    from llmd.tui.chat.app import create_chat_app

    app = create_chat_app(AsyncClient(address), address, system_prompt, params)
    app.run()
    if print_transcript:
        click.echo(app.conversation.transcript())


def _chat_params(settings: dict[str, Any]) -> SamplingParams:
    """The chat's default sampling settings with the flags given on the command line."""
    import dataclasses

    given = {name: value for name, value in settings.items() if value is not None}
    return dataclasses.replace(DEFAULT_CHAT_PARAMS, **given)


TOP_FLAGS = (
    Flag("addresses", flag_name="--address", show_default=ADDRESS_DEFAULT, metavar="ADDRESS"),
    Flag("addresses_file", metavar="FILE"),
    Flag("record", metavar="FILE"),
    Flag("replay", metavar="FILE"),
    Flag("speed"),
)
"""The flags of `llmd top`'s fleet and recording modes, typed from TopSettings."""


@click.command(
    epilog="""\b
Examples:
  llmd top                   # four snapshots a second
  llmd top --interval 1      # one a second: cheaper on a busy machine
  llmd top --address tcp://10.0.0.1:7070 --address tcp://10.0.0.2:7070   # a fleet
  llmd top --addresses-file fleet.txt --record incident.jsonl
  llmd top --replay incident.jsonl --speed 4
"""
)
@apply_options([click_option(TopSettings, flag) for flag in TOP_FLAGS])
@click.option(
    "--interval",
    type=click.FloatRange(0.1, 60.0),
    default=0.25,
    show_default=True,
    help="Seconds between stats snapshots.",
)
def top(interval: float, **settings: Any) -> None:
    """Watch the daemon live: queues, KV cache, throughput, latency, requests, hints.

    \b
    With several daemons (--address repeated, or --addresses-file): one row each and the
    fleet's totals; Enter shows the selected daemon's full view, Esc returns.
    Keys: q quits, p pauses, s changes the sort, Up/Down (or j/k) select a request.
    """
    from llmd.commands.top_launch import run_top
    from llmd.errors import LLMDError

    try:
        run_top(TopSettings(**settings), interval)
    except LLMDError as error:
        raise cli_error(error) from None
