"""A request's text-side state in the daemon: where its output goes and what was sent.

Kept by the text thread only, next to (not inside) the engine's Request, so the engine
thread and the text thread never write the same object.
"""

from __future__ import annotations

from llmd.engine.detokenizer import IncrementalDetokenizer
from llmd.engine.text_stream import TextStream
from llmd.protocol import LogprobEntry
from llmd.sampling_params import SamplingParams


class LiveRequest:
    """Routing, text stream and output bookkeeping of one in-flight request."""

    def __init__(
        self,
        engine_id: str,
        peer: bytes,
        client_id: str,
        stream: bool,
        params: SamplingParams,
        detokenizer: IncrementalDetokenizer,
        label: str | None = None,
    ) -> None:
        self.engine_id = engine_id
        self.label = label
        """The client's name for the request, for log lines (an HTTP X-Request-Id)."""
        self.peer = peer
        self.client_id = client_id
        self.stream = stream
        self.params = params
        self.text = TextStream(detokenizer)
        """The output text, with the stop string that ended it (shared with `LLM`)."""
        self.num_prompt_tokens = 0
        self.output_token_ids: list[int] = []
        """Tokens the client has been told about (the engine may be a step ahead)."""
        self.logprobs: list[LogprobEntry] | None = [] if params.logprobs is not None else None
        self.is_ending = False
        """A stop or abort was sent to the engine; later tokens are ignored."""
        self._num_progress_reported = 0

    def should_report_progress(self, num_computed: int, num_steps: int) -> bool:
        """True when prefill has reached a new 1/num_steps mark (at most num_steps - 1 times)."""
        if not self.num_prompt_tokens:
            return False
        mark = num_computed * num_steps // self.num_prompt_tokens
        if mark > self._num_progress_reported and mark < num_steps:
            self._num_progress_reported = mark
            return True
        return False
