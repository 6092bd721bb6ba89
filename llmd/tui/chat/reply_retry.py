"""A refused reply sent again with less history, and the notice of a max_tokens cut.

The chat's token estimate and the user's max_tokens can both be too generous for the
context; the daemon's refusal says by how much, so the chat retries instead of failing
(the max_tokens retry itself is the client's `astream_fitted`, shared with the CLI).
"""

from __future__ import annotations

from typing import Any

from llmd.tui.chat.assistant_reply import AssistantReply
from llmd.tui.chat.chat_host import ChatHost
from llmd.tui.chat.conversation import Conversation
from llmd.tui.chat.events import ReplyCut
from llmd.tui.chat.notice import Notice


def trim_notice(conversation: Conversation, num_dropped: int) -> str:
    """The notice for `num_dropped` exchanges dropped so the conversation fits the context."""
    dropped = "the oldest exchange" if num_dropped == 1 else f"the {num_dropped} oldest exchanges"
    kept = " (the system prompt is kept)" if conversation.system_prompt else ""
    return (
        f"Dropped {dropped} so the conversation fits the "
        f"model's {conversation.max_model_len}-token context{kept}."
    )


class ReplyRetry(ChatHost):
    """Chat app mixin (the app gives `_add`, `_current`, `_start_reply`): a refused reply
    sent again, or the notice that the client sent it again asking for less."""

    conversation: Conversation
    active_reply: AssistantReply | None

    async def on_reply_cut(self, event: ReplyCut) -> None:
        """max_tokens left the prompt no room: say so (the client already asks for what fits;
        the setting itself stays as the user chose it)."""
        reply = self._current(event.reply_number)
        if reply is None:
            return
        cut = event.cut
        notice = Notice(
            f"max_tokens {cut.wanted_max_tokens} does not fit: the prompt has "
            f"{cut.num_prompt_tokens} tokens of the model's {cut.max_model_len}-token "
            f"context, so this reply may use at most {cut.max_tokens}."
        )
        await self._add(notice, before=reply)  # above the reply it is about

    async def _retry_with_less_history(self, reply: AssistantReply, error: Any) -> bool:
        """The prompt is too long after all: drop one more exchange and send again; False if
        `error` is no such refusal or there is nothing left to drop."""
        is_too_long = getattr(error, "code", None) == "request_too_large" and (
            getattr(error, "parameter", None) == "prompt"
        )
        if is_too_long and self.conversation.pending_prompt and self.conversation.drop_oldest():
            # the estimate was short: drop one more exchange and send again
            await reply.finish("too long for the context: sent again with less history")
            prompt = self.conversation.pending_prompt
            await self._add(Notice(trim_notice(self.conversation, 1)))
            await self._start_reply(prompt, self.conversation.messages(), show_prompt=False)
            return True
        return False
