"""The chat's state: system prompt, alternating turns, sampling settings and token totals.

The daemon applies the model's chat template to `messages`; templates usually require
user and assistant turns to alternate, so a reply that failed takes its prompt with it.
"""

from __future__ import annotations

from typing import Any

from llmd.sampling_params import SamplingParams
from llmd.tui.chat.settings import DEFAULT_CHAT_PARAMS


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

    @property
    def is_waiting(self) -> bool:
        """True while a reply is being generated."""
        return self.pending_prompt is not None

    def begin(self, prompt: str) -> list[dict[str, str]]:
        """Start a turn with `prompt`; returns the messages to send (system first, if any)."""
        self.pending_prompt = prompt
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*messages, *self.turns, {"role": "user", "content": prompt}]

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

    def summary(self) -> str:
        """One line of this conversation's totals (for /stats)."""
        return (
            f"{len(self.turns) // 2} exchanges kept, {self.num_replies} replies: "
            f"{self.num_prompt_tokens} prompt tokens ({self.num_cached_tokens} from the prefix "
            f"cache), {self.num_completion_tokens} generated"
        )
