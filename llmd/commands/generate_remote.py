"""`llmd generate` through a running daemon: no model load, the daemon batches the prompts.

Every prompt is sent before any is read, so the daemon runs them together; replies for
the others wait in the client's per-request inboxes while one is being printed.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING

import click

from llmd.client.context_fit import MaxTokensCut
from llmd.client.fitted_stream import stream_fitted
from llmd.commands.generate_output import GeneratedText, TokenChoice

if TYPE_CHECKING:
    from llmd.client import Client, StreamEvent
    from llmd.commands.generate import GenerateJob
    from llmd.protocol import LogprobEntry

PROBE_TIMEOUT_S = 1.0
"""How long `llmd generate` waits for a daemon's health reply before running in-process."""


def find_daemon(address: str | None) -> Client | None:
    """A connected Client when a healthy daemon answers at `address`, else None."""
    from llmd.client import Client, DaemonNotRunningError
    from llmd.commands.daemon_files import read_daemon_files
    from llmd.protocol import default_address, parse_address

    address = address or default_address()
    parsed = parse_address(address)  # a malformed address is an error, not "no daemon"
    if parsed.scheme == "ipc" and not os.path.exists(parsed.path):
        return None
    if read_daemon_files(parsed).has_crashed:  # no probe on a dead daemon's socket file
        return None
    client = Client(address, timeout=PROBE_TIMEOUT_S)
    try:
        health = client.health()
        # A warming daemon queues requests and serves them when ready: use it.
        is_healthy = bool(health.get("is_healthy")) or health.get("status") == "warming"
    except DaemonNotRunningError:
        is_healthy = False
    if not is_healthy:
        client.close()
        return None
    client.timeout = 5.0
    return client


def generate_remote(client: Client, job: GenerateJob) -> list[GeneratedText]:
    """Send every prompt, then read the replies in order (streaming the text of a single one)."""
    with contextlib.ExitStack() as stack:
        streams = [_open_stream(client, job, prompt, stack) for prompt in job.prompts]
        return [_read(stream, is_streamed=len(streams) == 1) for stream in streams]


def _open_stream(
    client: Client, job: GenerateJob, prompt: str, stack: contextlib.ExitStack
) -> Generator[StreamEvent, None, None]:
    """Send one prompt and wait until the daemon accepted it (raises its refusal).

    The daemon refuses a prompt + max_tokens beyond the context; like the in-process path,
    the stream warns and asks for what fits instead.
    """
    if job.as_chat:
        messages = [{"role": "user", "content": prompt}]
        stream = stream_fitted(client, job.params, _warn, messages=messages)
    else:
        stream = stream_fitted(client, job.params, _warn, prompt=prompt)
    stack.enter_context(contextlib.closing(stream))
    next(stream)  # the `accepted` event
    return stream


def _warn(cut: MaxTokensCut) -> None:
    click.echo(cut.warning(), err=True)


def _read(stream: Generator[StreamEvent, None, None], is_streamed: bool) -> GeneratedText:
    """Collect one request's deltas until it finishes."""
    from llmd.client import Finished, TokenDelta

    parts: list[str] = []
    choices: list[TokenChoice] = []
    for event in stream:
        if isinstance(event, TokenDelta):
            parts.append(event.text)
            if is_streamed and event.text:
                sys.stdout.write(event.text)
                sys.stdout.flush()
            text = event.text if len(event.token_ids) == 1 else None
            choices.extend(_choice(entry, text) for entry in event.logprobs or ())
        elif isinstance(event, Finished):
            if is_streamed:
                sys.stdout.write("\n")
            timings, usage = event.timings, event.usage
            return GeneratedText(
                text=event.text if event.text is not None else "".join(parts),
                finish_reason=event.finish_reason,
                num_prompt_tokens=usage.get("prompt_tokens", 0),
                num_generated_tokens=usage.get("completion_tokens", len(event.token_ids)),
                num_cached_tokens=usage.get("cached_tokens", 0),
                ttft_s=timings.get("ttft"),
                tpot_s=timings.get("tpot"),
                e2e_s=timings.get("e2e"),
                logprobs=tuple(choices)
                or tuple(_choice(entry, None) for entry in event.logprobs or ()),
            )
    raise RuntimeError("the daemon's event stream ended without a finished message")


def _choice(entry: LogprobEntry, text: str | None) -> TokenChoice:
    """One logprobs entry; the daemon sends each token's own text (special tokens too).

    `text` (the delta's text) stands in only for a daemon that sends no token texts.
    """
    token_ids = entry.get("top_token_ids", ())
    texts: Sequence[str | None] = entry.get("top_tokens") or [None] * len(token_ids)
    alternatives = tuple(
        (int(token_id), token_text, float(logprob))
        for token_id, token_text, logprob in zip(token_ids, texts, entry.get("top_logprobs", ()))
    )
    token_text = entry.get("token", text)
    return TokenChoice(int(entry["token_id"]), token_text, float(entry["logprob"]), alternatives)
