"""A request's text-side state in the daemon: where its output goes and what was sent.

Kept by the text thread only, next to (not inside) the engine's Request, so the engine
thread and the text thread never write the same object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmd.engine.text_stream import TextStream
from llmd.protocol import LogprobEntry
from llmd.sampling_params import SamplingParams


@dataclass(eq=False)
class LiveRequest:
    """Routing, text stream and output bookkeeping of one in-flight request."""

    engine_id: str
    peer: bytes
    client_id: str
    stream: bool
    params: SamplingParams
    text: TextStream
    """The output text, with the stop string that ended it (shared with `LLM`)."""
    label: str | None = None
    """The client's name for the request, for log lines (an HTTP X-Request-Id)."""
    num_prompt_tokens: int = 0
    output_token_ids: list[int] = field(default_factory=list)
    """Tokens the client has been told about (the engine may be a step ahead)."""
    logprobs: list[LogprobEntry] | None = field(init=False)
    """The sent tokens' logprobs, when the request asked for them."""
    is_ending: bool = False
    """A stop or abort was sent to the engine; later tokens are ignored."""
    num_progress_reported: int = 0
    """Prefill progress marks reported so far (see `should_report_progress`)."""
    prompt_logprobs: list[LogprobEntry | None] | None = None
    """The prompt's logprobs once computed, until a message carries them."""
    prompt_text: str | None = None
    """The prompt's text for an echo, until a message carries it."""
    prompt_tokens: list[str] | None = None
    """Each prompt token's text for an echo, until a message carries them."""

    def __post_init__(self) -> None:
        self.logprobs = [] if self.params.logprobs is not None else None

    def should_report_progress(self, num_computed: int, num_steps: int) -> bool:
        """True when prefill has reached a new 1/num_steps mark (at most num_steps - 1 times)."""
        if not self.num_prompt_tokens:
            return False
        mark = num_computed * num_steps // self.num_prompt_tokens
        if mark > self.num_progress_reported and mark < num_steps:
            self.num_progress_reported = mark
            return True
        return False
