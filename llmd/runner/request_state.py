"""What the runner keeps of one request between steps, built from its `NewRequestData`.

The plan names running requests by id only, so their sampling settings and token history
must live here; it is also the row the sampling-batch builder reads (a `SampleSource`).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmd.engine.scheduler_output import NewRequestData
from llmd.sampling_params import SamplingParams


@dataclass(slots=True, eq=False)
class RequestState:
    """A request's sampling settings and history, and its output count at the next sample."""

    request_id: str
    sampling_params: SamplingParams
    eos_token_ids: tuple[int, ...]
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    """Outputs when the runner was sent the request (penalty counts start from them)."""
    num_output_tokens: int
    """Outputs before the sample this step takes (seeds and min_tokens read it)."""

    @classmethod
    def of(cls, data: NewRequestData) -> RequestState:
        """The state of a request the plan introduces."""
        return cls(
            data.request_id,
            data.sampling_params,
            data.eos_token_ids,
            data.prompt_token_ids,
            data.output_token_ids,
            len(data.output_token_ids),
        )

    @property
    def num_prompt_tokens(self) -> int:
        """Prompt length: a sampling chunk ending at position p samples output p - this."""
        return len(self.prompt_token_ids)
