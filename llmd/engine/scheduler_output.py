"""The plan of one engine step, handed from the scheduler to the model runner.

A plain dataclass so the runner needs nothing from the scheduler but this: which
requests, how many new tokens each, and which of them end this step with a sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmd.engine.request import Request


@dataclass
class ScheduledChunk:
    """Compute `num_new_tokens` tokens of `request` starting at its num_computed_tokens."""

    request: Request
    num_new_tokens: int
    is_sampling: bool
    """True when the chunk reaches the request's last token, so this step samples one."""

    @property
    def is_decode(self) -> bool:
        """A decode is a one-token sampling chunk (the previous step's output)."""
        return self.num_new_tokens == 1 and self.is_sampling


@dataclass
class SchedulerOutput:
    """Everything the runner must compute in one step; decodes come before prefills."""

    chunks: list[ScheduledChunk] = field(default_factory=list)
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    preempted_request_ids: list[str] = field(default_factory=list)
    num_waiting: int = 0
    num_running: int = 0

    @property
    def num_batched_tokens(self) -> int:
        """Tokens computed this step."""
        return self.num_prefill_tokens + self.num_decode_tokens

    @property
    def is_empty(self) -> bool:
        """True when there is nothing to run."""
        return not self.chunks
