"""`llmd chat -p QUESTION` and `echo QUESTION | llmd chat`: stream one reply to stdout, exit.

For scripts: the reply is the only thing on stdout; errors go to stderr with a non-zero
exit status, and an interrupted reply is aborted on the daemon before exiting.
"""

from __future__ import annotations

import contextlib
from typing import Any, TextIO

from llmd.client import Finished, TokenDelta
from llmd.client.context_fit import MaxTokensCut
from llmd.client.fitted_stream import stream_fitted
from llmd.errors import LLMDError, user_message
from llmd.sampling_params import SamplingParams
from llmd.tui.chat.conversation import Conversation
from llmd.tui.chat.reply_stats import format_reply_stats

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


def run_once(
    client: Any,
    prompt: str,
    params: SamplingParams,
    stdout: TextIO,
    stderr: TextIO,
    system_prompt: str | None = None,
    show_stats: bool = False,
) -> int:
    """Stream the reply to `prompt` through a blocking `client`; returns the exit status."""
    messages = Conversation(system_prompt, params).begin(prompt)
    finished: Finished | None = None
    is_line_open = False  # text was written and its last line has no newline yet

    def warn(cut: MaxTokensCut) -> None:  # max_tokens beyond the context: ask for what fits
        stderr.write(f"{cut.warning()}\n")

    stream = stream_fitted(client, params, warn, messages=messages)
    try:
        with contextlib.closing(stream) as events:
            for event in events:
                if isinstance(event, TokenDelta) and event.text:
                    stdout.write(event.text)
                    stdout.flush()
                    is_line_open = not event.text.endswith("\n")
                elif isinstance(event, Finished):
                    finished = event
    except KeyboardInterrupt:
        _end_line(stdout, is_line_open)
        stderr.write("Error: interrupted; the request was aborted\n")
        return EXIT_INTERRUPTED
    except LLMDError as error:
        _end_line(stdout, is_line_open)
        stderr.write(f"Error: {user_message(error)}\n")
        return EXIT_FAILED
    _end_line(stdout, is_line_open)
    if finished is None or finished.finish_reason == "abort":
        stderr.write("Error: the daemon aborted the reply before it finished\n")
        return EXIT_FAILED
    if show_stats and finished is not None:
        stats = format_reply_stats(
            finished.finish_reason, finished.usage, finished.timings, finished.num_preemptions
        )
        stderr.write(stats + "\n")
    return EXIT_OK


def _end_line(stdout: TextIO, is_line_open: bool) -> None:
    if is_line_open:
        stdout.write("\n")
    stdout.flush()
