"""Sending a refused reply again: with a max_tokens that fits, or with less history.

The chat's token estimate and the user's max_tokens can both be too generous for the
context; the daemon's refusal says by how much, so the chat retries instead of failing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from llmd.client.context_fit import fitted_max_tokens, refused_max_tokens
from llmd.sampling_params import SamplingParams
from llmd.tui.chat.assistant_reply import AssistantReply
from llmd.tui.chat.conversation import Conversation
from llmd.tui.chat.notice import Notice


def trim_notice(conversation: Conversation, num_dropped: int) -> str:
    """The notice for `num_dropped` exchanges dropped so the conversation fits the context."""
    dropped = "the oldest exchange" if num_dropped == 1 else f"the {num_dropped} oldest exchanges"
    kept = " (the system prompt is kept)" if conversation.system_prompt else ""
    return (
        f"Dropped {dropped} so the conversation fits the "
        f"model's {conversation.max_model_len}-token context{kept}."
    )


class ReplyRetry:
    """Chat app mixin (the app gives `_add`, `_start_reply`): sends a refused reply again."""

    conversation: Conversation
    active_reply: AssistantReply | None
    _sent_messages: list[dict[str, str]]
    _sent_params: SamplingParams

    async def _retry_with_fitted_max_tokens(self, reply: AssistantReply, error: Any) -> bool:
        """max_tokens leaves the prompt no room: send again asking for what fits; False if
        `error` is no such refusal. The setting itself stays as the user chose it."""
        fit = refused_max_tokens(error)
        prompt = self.conversation.pending_prompt
        if fit is None or prompt is None:
            return False
        num_prompt_tokens, context_len = fit
        wanted = self._sent_params.max_tokens
        max_tokens = fitted_max_tokens(num_prompt_tokens, wanted, context_len)
        if max_tokens >= wanted:
            return False
        await reply.remove()  # the refused attempt has no text: the retry takes its place
        self.active_reply = None
        await self._add(
            Notice(
                f"max_tokens {wanted} does not fit: the prompt has {num_prompt_tokens} tokens "
                f"of the model's {context_len}-token context, so this reply may use at most "
                f"{max_tokens}."
            )
        )
        params = dataclasses.replace(self._sent_params, max_tokens=max_tokens)
        await self._start_reply(prompt, self._sent_messages, params, show_prompt=False)
        return True

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
