"""The chat app as its mixins see it: textual's App plus the few ChatApp methods they call.

Only the type checker reads the declarations; at run time the mixins derive from `object`
and `ChatApp` (which defines these methods) puts them before `App`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual.app import App
    from textual.widget import Widget

    from llmd.tui.chat.assistant_reply import AssistantReply

    class ChatHost(App[None]):
        """What CommandRunner, DaemonWatch and ReplyRetry call on the app."""

        async def _add(self, widget: Widget, before: Widget | None = None) -> None: ...

        def _update_status(self, activity: str = "") -> None: ...

        async def action_clear(self) -> None: ...

        def _current(self, number: int) -> AssistantReply | None: ...

        async def _start_reply(
            self, prompt: str, messages: list[dict[str, str]], show_prompt: bool = True
        ) -> None: ...

else:
    ChatHost = object
