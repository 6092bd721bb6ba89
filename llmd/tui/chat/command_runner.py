"""Running the chat's slash commands: /clear, /system, /set, /save, /stats, /help, /quit.

Parsing lives in `commands`; here each parsed command acts on the app, and any failure
becomes a notice in the conversation instead of a crash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import work

from llmd.client.status_report import format_status, status_report
from llmd.errors import LLMDError
from llmd.tui.chat.chat_host import ChatHost
from llmd.tui.chat.commands import COMMAND_HELP, KEYS_HELP, parse_command
from llmd.tui.chat.conversation import Conversation
from llmd.tui.chat.events import StatsFetched
from llmd.tui.chat.notice import Notice, describe_error
from llmd.tui.chat.settings import apply_setting, describe, describe_all

if TYPE_CHECKING:
    from llmd.client import AsyncClient


class CommandRunner(ChatHost):
    """Chat app mixin (the app gives `_add`, `_update_status`, `action_clear`): runs commands."""

    client: AsyncClient
    conversation: Conversation
    is_running: bool

    async def _run_command(self, text: str) -> None:
        try:
            command = parse_command(text)
            if command.name == "clear":
                await self.action_clear()
            elif command.name == "system":
                self.conversation.system_prompt = command.argument or None
                shown = f"set to: {command.argument}" if command.argument else "removed"
                await self._add(Notice(f"System prompt {shown}. It applies from the next reply."))
            elif command.name == "set" and not command.argument:
                await self._add(Notice(describe_all(self.conversation.params)))
            elif command.name == "set":
                name, value = command.argument.split()
                self.conversation.params = apply_setting(self.conversation.params, name, value)
                await self._add(Notice(f"Settings: {describe(self.conversation.params)}"))
            elif command.name == "save":
                await self._save(command.argument)
            elif command.name == "stats":
                self._fetch_stats()
            elif command.name == "help":
                await self._add(Notice("\n".join([*COMMAND_HELP.values(), KEYS_HELP])))
            elif command.name == "quit":
                self.exit()
        except LLMDError as error:
            await self._add(Notice(describe_error(error), is_error=True))
        self._update_status("generating…" if self.conversation.is_waiting else "")

    async def _save(self, path_text: str) -> None:
        """Write the transcript to a file (a failure is a notice, not a crash)."""
        from pathlib import Path

        path = Path(path_text).expanduser()
        try:
            path.write_text(self.conversation.transcript(), encoding="utf-8")
        except OSError as error:
            await self._add(Notice(f"Cannot save to {path}: {error.strerror}", is_error=True))
            return
        await self._add(Notice(f"Saved the conversation to {path}."))

    @work(group="stats", exclusive=True)
    async def _fetch_stats(self) -> None:
        try:
            snapshot = await self.client.stats(include_requests=False, include_block_map=False)
            self.post_message(StatsFetched(snapshot))
        except Exception as error:
            self.post_message(StatsFetched(None, error))

    async def on_stats_fetched(self, event: StatsFetched) -> None:
        if not self.is_running:  # a late answer while the app shuts down: no widgets to update
            return
        if event.snapshot is None:
            # A StatsFetched without a snapshot always carries the error that prevented it.
            error = event.error or RuntimeError("no stats snapshot")
            await self._add(Notice(describe_error(error), is_error=True))
            return
        lines = [format_status(status_report(event.snapshot)), "", self.conversation.summary()]
        await self._add(Notice("\n".join(lines)))
