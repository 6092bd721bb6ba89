"""The chat's watch on its daemon: health polls, and notices when it stops, returns or restarts.

A daemon can go away or be replaced (another pid, maybe another model) while the chat is
open; noticing it here keeps the conversation usable and the status line truthful.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import work

from llmd.tui.chat.chat_host import ChatHost
from llmd.tui.chat.conversation import Conversation
from llmd.tui.chat.events import DaemonInfo
from llmd.tui.chat.notice import Notice

HEALTH_POLL_S = 2.0
"""How often the chat checks that the daemon is there and still the same one."""

if TYPE_CHECKING:
    from llmd.client import AsyncClient


def daemon_identity(health: dict[str, Any]) -> tuple[Any, ...]:
    """What changes when a different daemon answers: its instance id (if sent), pid, start."""
    return (health.get("instance_id"), health.get("pid"))


class DaemonWatch(ChatHost):
    """Chat app mixin (the app gives `_add`, `_update_status`): watches the daemon's health."""

    client: AsyncClient
    address: str
    conversation: Conversation
    model_name: str
    daemon_health: dict[str, Any] | None
    is_daemon_lost: bool
    is_running: bool
    _is_health_pending: bool

    def _watch_daemon(self) -> None:
        """Check the daemon now, then every HEALTH_POLL_S seconds."""
        self._fetch_health()
        self.set_interval(HEALTH_POLL_S, self._poll_health)

    def _poll_health(self) -> None:
        """Check the daemon, unless the last check still waits (the client's timeout, longer
        than the poll interval, is how a stopped daemon is noticed: never cut it short)."""
        if not self._is_health_pending:
            self._fetch_health()

    @work(group="info", exclusive=True)
    async def _fetch_health(self) -> None:
        self._is_health_pending = True
        try:
            health = await self.client.health()
            if daemon_identity(health) != daemon_identity(self.daemon_health or {}):
                facts = await self.client.stats(include_requests=False, include_block_map=False)
                health = {**health, "max_model_len": facts.daemon.max_model_len}
            else:
                health = {**health, "max_model_len": self.conversation.max_model_len}
            self.post_message(DaemonInfo(health))
        except Exception as error:
            self.post_message(DaemonInfo(None, error))
        finally:
            self._is_health_pending = False

    def _daemon_lost(self) -> None:
        self.is_daemon_lost = True

    async def on_daemon_info(self, event: DaemonInfo) -> None:
        if not self.is_running:  # a late answer while the app shuts down: no widgets to update
            return
        activity = "generating…" if self.conversation.is_waiting else ""
        if event.health is None:
            if not self.is_daemon_lost:
                self._daemon_lost()
                await self._add(
                    Notice(
                        f"The daemon stopped answering at {self.address}; the chat reconnects "
                        "when it is back (start it with: llmd serve).",
                        is_error=True,
                    )
                )
            self._update_status(activity)
            return
        health, previous = event.health, self.daemon_health
        if previous is not None and daemon_identity(health) != daemon_identity(previous):
            model = str(health.get("model", "?")).rstrip("/").rsplit("/", 1)[-1]
            change = (
                "" if health.get("model") == previous.get("model") else f", now serving {model}"
            )
            await self._add(
                Notice(
                    f"The daemon restarted (pid {previous.get('pid')} → {health.get('pid')})"
                    f"{change}. The conversation is kept."
                )
            )
        elif self.is_daemon_lost:
            await self._add(Notice("The daemon is answering again."))
        self.is_daemon_lost = False
        self.daemon_health = health
        self.model_name = str(health.get("model", "?")).rstrip("/").rsplit("/", 1)[-1]
        max_model_len = health.get("max_model_len")
        self.conversation.max_model_len = max_model_len if isinstance(max_model_len, int) else None
        self._update_status(activity)
