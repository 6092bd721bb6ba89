"""`llmd chat`: a conversation pinned to the bottom, a prompt line, replies streamed as Markdown.

A worker streams each reply from the daemon and only posts messages; the handlers below
own the conversation state and the widgets, so a stopped reply can never be half-updated.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static
from textual.worker import Worker

from llmd.client import Accepted, AsyncClient, Finished, PrefillProgress, TokenDelta
from llmd.client.context_fit import MaxTokensCut
from llmd.client.fitted_stream import astream_fitted
from llmd.sampling_params import SamplingParams
from llmd.tui.chat.assistant_reply import AssistantReply
from llmd.tui.chat.command_runner import CommandRunner
from llmd.tui.chat.commands import KEYS_HELP, is_command, unescape_prompt
from llmd.tui.chat.conversation import Conversation
from llmd.tui.chat.daemon_watch import DaemonWatch, daemon_identity
from llmd.tui.chat.events import (
    ReplyAccepted,
    ReplyCut,
    ReplyDelta,
    ReplyFailed,
    ReplyFinished,
    ReplyPrefill,
)
from llmd.tui.chat.history import PromptHistory
from llmd.tui.chat.notice import Notice, describe_error
from llmd.tui.chat.prompt_input import PromptInput
from llmd.tui.chat.reply_retry import ReplyRetry, trim_notice
from llmd.tui.chat.reply_stats import format_reply_stats
from llmd.tui.chat.settings import DEFAULT_CHAT_PARAMS, describe
from llmd.tui.chat.user_message import UserMessage
from llmd.tui.formatting import printable

__all__ = ["KEYS_HELP", "ChatApp", "create_chat_app", "daemon_identity", "describe_error"]
"""Names other code imports from here; the rest live in the modules they come from."""

ABORT_GRACE_S = 3.0
"""After Esc, how long the daemon has to confirm the abort before the stream is dropped."""


class ChatApp(DaemonWatch, ReplyRetry, CommandRunner, App[None]):
    """A chat with the model served by one llmd daemon."""

    CSS_PATH = "chat.tcss"
    TITLE = "llmd chat"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "stop_reply", "Stop reply"),
        Binding("ctrl+c", "interrupt", "Stop / quit", priority=True),
        Binding("ctrl+l", "clear", "Clear"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    def __init__(self, client: AsyncClient, address: str, conversation: Conversation) -> None:
        super().__init__()
        self.client = client
        """An AsyncClient (or a fake with the same stream/abort/health/stats/close)."""
        self.address = address
        self.conversation = conversation
        self.history = PromptHistory()
        self.model_name = "?"
        self.reply_number = 0
        """Number of the newest reply; events of older replies are ignored."""
        self.active_reply: AssistantReply | None = None
        self.active_client_id: str | None = None
        self._reply_worker: Worker[None] | None = None
        self._sent_messages: list[dict[str, str]] = []
        self._stop_requested: int | None = None
        """The reply the user stopped (Esc/Ctrl+C), told apart from one the daemon ended."""
        self.daemon_health: dict[str, Any] | None = None
        self.is_daemon_lost = False
        self._is_health_pending = False
        """A health check is under way; the poll waits for its answer or its timeout."""

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Static("", id="status", markup=False)
        yield VerticalScroll(id="conversation")
        yield PromptInput(self.history, id="prompt", placeholder="Message the model, or /help")
        yield Footer()

    async def on_mount(self) -> None:
        self.query_one("#conversation", VerticalScroll).anchor()
        self.query_one("#prompt", PromptInput).focus()
        self._update_status()
        await self._add(Notice(f"Connected to {self.address}. {KEYS_HELP}. /help for commands."))
        self._watch_daemon()

    def _update_status(self, activity: str = "") -> None:
        model = (
            self.model_name if not self.is_daemon_lost else f"{self.model_name} (daemon stopped)"
        )
        # Most important first; a narrow terminal wraps the line instead of cutting it.
        parts = [model, activity] if activity else [model]
        parts.append(describe(self.conversation.params))
        if self.conversation.system_prompt:
            parts.append("system prompt set")
        self.query_one("#status", Static).update(" │ ".join(parts))

    async def _add(self, widget: Any, before: Any = None) -> None:
        """Show `widget` at the end of the conversation, or above the widget `before`."""
        await self.query_one("#conversation", VerticalScroll).mount(widget, before=before)

    # ------------------------------------------------------------------ input

    async def on_prompt_input_submitted(self, event: PromptInput.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        if self.conversation.is_waiting and not is_command(text):
            # keep what was typed: it can be sent once the reply is done
            await self._add(Notice("A reply is still streaming: Esc stops it.", is_error=True))
            return
        event.input.value = ""
        self.history.add(text)
        if is_command(text):
            await self._run_command(text)
        else:
            await self.send_prompt(unescape_prompt(text))

    async def send_prompt(self, prompt: str) -> None:
        """Show the prompt and start streaming its reply."""
        if self.conversation.is_waiting:
            await self._add(Notice("A reply is still streaming: Esc stops it.", is_error=True))
            return
        num_trimmed = self.conversation.num_trimmed
        messages = self.conversation.begin(prompt)
        if self.conversation.num_trimmed > num_trimmed:
            num_dropped = self.conversation.num_trimmed - num_trimmed
            await self._add(Notice(trim_notice(self.conversation, num_dropped)))
        await self._start_reply(prompt, messages)

    async def _start_reply(
        self, prompt: str, messages: list[dict[str, str]], show_prompt: bool = True
    ) -> None:
        """Stream a reply to `messages` with the chat's settings."""
        params = self.conversation.params
        self._sent_messages = messages
        self.reply_number += 1
        self.active_reply = AssistantReply(self.reply_number)
        self.active_client_id = None
        if show_prompt:
            await self._add(UserMessage(printable(prompt), classes="prompt"))
        await self._add(self.active_reply)
        self._update_status("generating…")
        self._reply_worker = self._stream_reply(self.reply_number, messages, params)

    # ------------------------------------------------------------------ actions

    async def action_stop_reply(self) -> None:
        """Stop the reply: ask the daemon to abort, and drop the stream if it does not answer."""
        if not self.conversation.is_waiting:
            return
        number = self.reply_number
        if self.active_client_id is None:
            await self._end_reply_locally(number, "stopped before the daemon accepted it")
            return
        self._update_status("stopping…")
        self._stop_requested = number
        self._send_abort(self.active_client_id)
        self.set_timer(ABORT_GRACE_S, lambda: self._abort_timed_out(number))

    async def action_interrupt(self) -> None:
        """Ctrl+C: stop a streaming reply, or quit when there is none."""
        if self.conversation.is_waiting:
            await self.action_stop_reply()
        else:
            self.exit()

    async def action_clear(self) -> None:
        """Forget the conversation and empty the screen (drops a streaming reply)."""
        if self.conversation.is_waiting and self._reply_worker is not None:
            self._reply_worker.cancel()  # closing its stream aborts the request
        self.active_reply = None
        self.conversation.clear()
        await self.query_one("#conversation", VerticalScroll).remove_children()
        await self._add(Notice("Conversation cleared."))

    async def _abort_timed_out(self, number: int) -> None:
        if self.is_running and self.conversation.is_waiting and number == self.reply_number:
            await self._end_reply_locally(number, "stopped (the daemon did not confirm the abort)")

    async def _end_reply_locally(self, number: int, reason: str) -> None:
        """Cancel the stream worker (closing the stream aborts the request) and finish."""
        if self._reply_worker is not None:
            self._reply_worker.cancel()
        reply = self.active_reply
        if reply is not None and reply.reply_number == number:
            await reply.finish(reason)
            self.conversation.complete(reply.text)
        else:
            self.conversation.cancel()
        self.active_reply = None
        self._update_status()

    # ------------------------------------------------------------------ workers

    @work(group="reply", exclusive=True)
    async def _stream_reply(
        self, number: int, messages: list[dict[str, str]], params: SamplingParams
    ) -> None:
        """Stream one reply, posting an event per daemon message."""

        def post_cut(cut: MaxTokensCut) -> None:  # max_tokens beyond the context: ask less
            self.post_message(ReplyCut(number, cut))

        try:
            stream = astream_fitted(self.client, params, post_cut, messages=messages)
            async with contextlib.aclosing(stream) as events:
                async for event in events:
                    if isinstance(event, Accepted):
                        self.post_message(
                            ReplyAccepted(
                                number, event.id, event.request_id, event.num_prompt_tokens
                            )
                        )
                    elif isinstance(event, PrefillProgress):
                        self.post_message(
                            ReplyPrefill(number, event.num_computed_tokens, event.num_prompt_tokens)
                        )
                    elif isinstance(event, TokenDelta):
                        if event.text:
                            self.post_message(ReplyDelta(number, event.text))
                    elif isinstance(event, Finished):
                        self.post_message(ReplyFinished(number, event))
        except Exception as error:  # typed daemon errors, or the daemon going away
            self.post_message(ReplyFailed(number, error))

    @work(group="abort")
    async def _send_abort(self, client_id: str) -> None:
        with contextlib.suppress(Exception):  # a lost daemon is caught by the stream itself
            await self.client.abort(client_id)

    # ------------------------------------------------------------------ worker events

    def _current(self, number: int) -> AssistantReply | None:
        """The reply an event of reply `number` is for: None if it was stopped or replaced,
        or if the app is shutting down (its widgets may already be gone)."""
        reply = self.active_reply
        if reply is None or reply.reply_number != number or not self.is_running:
            return None
        return reply

    def on_reply_accepted(self, event: ReplyAccepted) -> None:
        reply = self._current(event.reply_number)
        if reply is not None:
            self.active_client_id = event.client_id
            self.conversation.observe_prompt(self._sent_messages, event.num_prompt_tokens)
            reply.show_status(f"{event.request_id}: {event.num_prompt_tokens} prompt tokens queued")

    def on_reply_prefill(self, event: ReplyPrefill) -> None:
        reply = self._current(event.reply_number)
        if reply is not None:
            reply.show_status(
                f"prefill {event.num_computed_tokens}/{event.num_prompt_tokens} prompt tokens"
            )

    def on_reply_delta(self, event: ReplyDelta) -> None:
        reply = self._current(event.reply_number)
        if reply is not None:
            if not reply.text:
                reply.show_status("streaming…")
            reply.append(event.text, printable(event.text))

    async def on_reply_finished(self, event: ReplyFinished) -> None:
        reply = self._current(event.reply_number)
        if reply is None:
            return
        finished = event.finished
        stats = format_reply_stats(
            finished.finish_reason, finished.usage, finished.timings, finished.num_preemptions
        )
        if finished.finish_reason == "abort":
            by_user = self._stop_requested == event.reply_number
            stats += " (you stopped it)" if by_user else " (the daemon ended it: stopping?)"
        await reply.finish(stats)
        self.conversation.complete(reply.text, finished.usage)
        self.active_reply = None
        self._update_status()

    async def on_reply_failed(self, event: ReplyFailed) -> None:
        reply = self._current(event.reply_number)
        if reply is None:
            return
        error = event.error
        if await self._retry_with_less_history(reply, error):
            return
        is_gone = getattr(error, "code", None) == "daemon_not_running"
        await reply.finish("cut off: the daemon stopped" if is_gone else "failed")
        self.conversation.cancel()
        self.active_reply = None
        if is_gone:
            self._daemon_lost()
        await self._add(Notice(describe_error(error), is_error=True))
        self._update_status()

    async def on_unmount(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.close()


def create_chat_app(
    client: AsyncClient,
    address: str,
    system_prompt: str | None = None,
    params: SamplingParams = DEFAULT_CHAT_PARAMS,
) -> ChatApp:
    """The chat app; the CLI passes an AsyncClient, tests a fake with the same methods."""
    return ChatApp(client, address, Conversation(system_prompt, params))
