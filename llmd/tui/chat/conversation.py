"""The chat's state: system prompt, alternating turns, sampling settings and token totals.

The daemon applies the model's chat template to `messages`; templates usually require
user and assistant turns to alternate, so a reply that failed takes its prompt with it.
A long chat keeps fitting the model's context: the oldest exchanges are dropped (the
system prompt stays) so that the prompt leaves room for a reply, estimating tokens from
the daemon's own count of the previous prompt.
"""

from __future__ import annotations

from typing import Any

from llmd.sampling_params import SamplingParams
from llmd.tui.chat.settings import DEFAULT_CHAT_PARAMS

TOKENS_PER_CHAR_GUESS = 0.5
"""Tokens per character before the daemon has counted a prompt (generous: trims early)."""
MESSAGE_OVERHEAD_CHARS = 12
"""What a chat template adds around each message, in characters (role markers, newlines)."""


def message_chars(messages: list[dict[str, str]]) -> int:
    """The size of `messages` as the token estimate counts it."""
    return sum(len(message["content"]) + MESSAGE_OVERHEAD_CHARS for message in messages)


class Conversation:
    """What has been said, what the next request sends, and what it all cost."""

    def __init__(
        self, system_prompt: str | None = None, params: SamplingParams = DEFAULT_CHAT_PARAMS
    ) -> None:
        self.system_prompt = system_prompt or None
        self.params = params
        self.turns: list[dict[str, str]] = []
        """Completed user/assistant messages, in order."""
        self.pending_prompt: str | None = None
        """The user message whose reply is being generated."""
        self.num_replies = 0
        self.num_prompt_tokens = 0
        self.num_completion_tokens = 0
        self.num_cached_tokens = 0
        self.tokens_per_char = TOKENS_PER_CHAR_GUESS
        """Measured on the last prompt: the daemon's token count / its message_chars."""
        self.max_model_len: int | None = None
        """The model's context, once the daemon told it; None means no trimming."""
        self.num_trimmed = 0
        """Exchanges dropped so far to fit the context."""

    @property
    def is_waiting(self) -> bool:
        """True while a reply is being generated."""
        return self.pending_prompt is not None

    def begin(self, prompt: str) -> list[dict[str, str]]:
        """Start a turn with `prompt`; returns the messages to send (system first, if any).

        The oldest exchanges are dropped first when the prompt would leave too little of
        the context for the reply (see `fit`).
        """
        self.pending_prompt = prompt
        self.fit()
        return self.messages()

    def messages(self) -> list[dict[str, str]]:
        """What the pending turn sends: system prompt, kept turns, the new prompt."""
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*messages, *self.turns, {"role": "user", "content": self.pending_prompt or ""}]

    def reply_reserve(self) -> int:
        """Context tokens kept free for the reply: max_tokens, at most half the context."""
        if self.max_model_len is None:
            return 0
        return min(self.params.max_tokens, self.max_model_len // 2)

    def estimated_tokens(self) -> int:
        """The pending prompt's size in tokens, estimated from the last measured ratio."""
        return round(message_chars(self.messages()) * self.tokens_per_char)

    def fit(self) -> int:
        """Drop the oldest exchanges until prompt + reply reserve fit; how many were dropped."""
        if self.max_model_len is None:
            return 0
        budget = self.max_model_len - self.reply_reserve()
        num_dropped = 0
        while self.turns and self.estimated_tokens() > budget:
            self.drop_oldest()
            num_dropped += 1
        return num_dropped

    def drop_oldest(self) -> bool:
        """Forget the oldest exchange (the daemon found the prompt too long); False if none."""
        if not self.turns:
            return False
        del self.turns[:2]
        self.num_trimmed += 1
        return True

    def observe_prompt(self, messages: list[dict[str, str]], num_prompt_tokens: int) -> None:
        """The daemon counted the prompt of `messages`: refine the tokens-per-char estimate."""
        chars = message_chars(messages)
        if chars > 0 and num_prompt_tokens > 0:
            self.tokens_per_char = num_prompt_tokens / chars

    def complete(self, reply_text: str, usage: dict[str, Any] | None = None) -> None:
        """The reply finished (or was stopped with some text): keep the exchange."""
        if self.pending_prompt is None:
            return
        if reply_text:
            self.turns.append({"role": "user", "content": self.pending_prompt})
            self.turns.append({"role": "assistant", "content": reply_text})
        self.pending_prompt = None
        self.num_replies += 1
        usage = usage or {}
        self.num_prompt_tokens += int(usage.get("prompt_tokens", 0))
        self.num_completion_tokens += int(usage.get("completion_tokens", 0))
        self.num_cached_tokens += int(usage.get("cached_tokens", 0))

    def cancel(self) -> None:
        """The reply failed: forget its prompt so turns keep alternating."""
        self.pending_prompt = None

    def clear(self) -> None:
        """Forget every turn; the system prompt, settings and totals stay."""
        self.turns.clear()
        self.pending_prompt = None

    def transcript(self) -> str:
        """The conversation as plain text (for /save and --print-transcript)."""
        parts = [f"[system]\n{self.system_prompt}"] if self.system_prompt else []
        if self.num_trimmed:
            parts.append(f"[{self.num_trimmed} earlier exchanges were dropped to fit the context]")
        parts += [f"[{turn['role']}]\n{turn['content']}" for turn in self.turns]
        return "\n\n".join(parts) + "\n"

    def summary(self) -> str:
        """One line of this conversation's totals (for /stats)."""
        return (
            f"{len(self.turns) // 2} exchanges kept, {self.num_replies} replies: "
            f"{self.num_prompt_tokens} prompt tokens ({self.num_cached_tokens} from the prefix "
            f"cache), {self.num_completion_tokens} generated"
        )
