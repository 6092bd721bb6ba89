"""Prompt logprobs computed in the prefill pass, one chunk at a time.

A request that asks for `prompt_logprobs` gets, at each of its prompt positions in a
step, the logits of that position reduced at once (log_softmax, the next prompt token's
logprob and rank, the top-k): whole-vocabulary logits never outlive a few hundred rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from llmd.outputs import TokenLogprob
from llmd.runner.host_transfer import to_device

ROWS_PER_PASS = 256
"""Positions whose [rows, vocab] logits exist at one time: bounds the extra memory."""


@dataclass(frozen=True, slots=True)
class PromptLogprobSpan:
    """One request's prompt positions in a step's hidden rows, and the tokens they predict.

    Position `first_position + i` sits at hidden row `first_row + i` and predicts prompt
    token `target_token_ids[i]` (the token at position `first_position + i + 1`).
    """

    request_id: str
    first_position: int
    first_row: int
    target_token_ids: list[int]
    num_top_logprobs: int


def prompt_logprob_span(
    request_id: str,
    prompt_token_ids: list[int],
    num_top_logprobs: int,
    start: int,
    end: int,
    first_row: int,
) -> PromptLogprobSpan | None:
    """The span of a chunk computing positions start..end-1, or None if none predicts a
    prompt token (the last prompt position predicts the first output: the sampler's)."""
    last = min(end, len(prompt_token_ids) - 1)
    if last <= start:
        return None
    targets = prompt_token_ids[start + 1 : last + 1]
    return PromptLogprobSpan(request_id, start, first_row, targets, num_top_logprobs)


@dataclass(eq=False)
class PromptLogprobs:
    """The packed results of a step's spans, on the device until the step is resolved.

    Each span's tensor is [positions, 2 + 2k] float64: the target's logprob and rank,
    then the top-k ids and their logprobs, so one copy per span reaches the host.
    """

    spans: list[PromptLogprobSpan]
    packed: list[torch.Tensor]

    @classmethod
    def compute(
        cls, compute_logits, hidden: torch.Tensor, spans: list[PromptLogprobSpan]
    ) -> PromptLogprobs:
        """Reduce the spans' rows of `hidden` [rows, hidden_size] with `compute_logits`."""
        packed = [_reduce_span(compute_logits, hidden, span) for span in spans]
        return cls(spans, packed)

    def copy_to_host(self) -> None:
        """Queue non-blocking copies of the results into pinned host memory."""
        hosted = []
        for tensor in self.packed:
            host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            host.copy_(tensor, non_blocking=True)
            hosted.append(host)
        self.packed = hosted

    def read(self) -> dict[str, tuple[int, list[TokenLogprob]]]:
        """Per request id: the first position and one entry per position, read on the host."""
        results = {}
        for span, tensor in zip(self.spans, self.packed):
            k = span.num_top_logprobs
            entries = [
                TokenLogprob(
                    token_id=token_id,
                    logprob=row[0],
                    rank=int(row[1]),
                    top_token_ids=tuple(int(i) for i in row[2 : 2 + k]),
                    top_logprobs=tuple(row[2 + k : 2 + 2 * k]),
                )
                for token_id, row in zip(span.target_token_ids, tensor.tolist())
            ]
            results[span.request_id] = (span.first_position, entries)
        return results


def _reduce_span(compute_logits, hidden: torch.Tensor, span: PromptLogprobSpan) -> torch.Tensor:
    """One span's packed rows, ROWS_PER_PASS positions of logits at a time."""
    num_positions = len(span.target_token_ids)
    targets = to_device(span.target_token_ids, torch.int64, hidden.device)  # [positions]
    k = span.num_top_logprobs
    parts = []
    for offset in range(0, num_positions, ROWS_PER_PASS):
        count = min(ROWS_PER_PASS, num_positions - offset)
        first = span.first_row + offset
        logits = compute_logits(hidden[first : first + count])  # [count, vocab] float32
        logprobs = torch.log_softmax(logits, dim=-1)
        del logits
        chosen = logprobs.gather(1, targets[offset : offset + count, None])  # [count, 1]
        ranks = (logprobs > chosen).sum(dim=-1, keepdim=True) + 1
        top_logprobs, top_ids = logprobs.topk(k, dim=-1)  # [count, k]
        parts.append(
            torch.cat(
                [chosen.double(), ranks.double(), top_ids.double(), top_logprobs.double()], dim=1
            )
        )
    return torch.cat(parts)
