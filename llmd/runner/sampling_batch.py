"""Per-step sampling parameters of a batch, gathered from requests into device tensors.

The sampler works on whole batches, so per-request settings are packed once per step; the
builder does only O(rows) Python work unless penalties need the rows' token histories.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from llmd.runner.host_transfer import to_device
from llmd.runner.verify_penalties import VerifyPenaltyRows, kept_row_weights
from llmd.sampling_params import SamplingParams

if TYPE_CHECKING:
    from llmd.runner.sampling_state import SamplingState
    from llmd.runner.token_bitmask import AllowedTokens

GREEDY_TEMPERATURE = 1e-5
"""Temperatures below this are treated as 0 (greedy): dividing by them overflows float32."""
_MASK64 = (1 << 64) - 1


class SampleSource(Protocol):
    """What the builder reads from a row: `RequestState` and `SampleRow` provide it."""

    sampling_params: SamplingParams
    eos_token_ids: tuple[int, ...]

    @property
    def num_output_tokens(self) -> int: ...

    @property
    def prompt_token_ids(self) -> list[int]: ...

    @property
    def output_token_ids(self) -> list[int]: ...


@dataclass
class SampleRow:
    """One row to sample, without torch: a request's parameters and its tokens so far."""

    sampling_params: SamplingParams
    prompt_token_ids: list[int] = field(default_factory=list)
    output_token_ids: list[int] = field(default_factory=list)
    eos_token_ids: tuple[int, ...] = ()

    @property
    def num_output_tokens(self) -> int:
        """Tokens generated so far (the next sample is output token number this)."""
        return len(self.output_token_ids)


@dataclass
class PenaltyTensors:
    """Penalty settings and token statistics of the rows that use penalties."""

    row_indices: torch.Tensor  # [num_penalized] int64, rows of the batch
    repetition_penalties: torch.Tensor  # [num_penalized] float32
    presence_penalties: torch.Tensor  # [num_penalized] float32
    frequency_penalties: torch.Tensor  # [num_penalized] float32
    prompt_token_mask: torch.Tensor | None  # [num_penalized, vocab] bool; None: no repetition
    output_token_counts: torch.Tensor  # [num_penalized, vocab] float32
    count_slots: torch.Tensor | None = None
    """[num_penalized] int64: rows of `SamplingState.output_counts` to add the sampled
    tokens to after this step; None when counts were rebuilt from the histories."""
    verify_rows: VerifyPenaltyRows | None = None
    """Where penalized verify chunks put their rows; None when the step verifies none."""

    def kept_weights(self, sampled_ids: torch.Tensor) -> torch.Tensor | None:
        """[num_penalized] float32: 1 for rows whose sample is output (None: every row's)."""
        if self.verify_rows is None:
            return None
        return kept_row_weights(self.verify_rows, sampled_ids, self.row_indices.shape[0])


@dataclass
class SamplingBatch:
    """Everything the sampler needs for one step, built by `build_sampling_batch`."""

    num_rows: int
    vocab_size: int
    greedy_rows: torch.Tensor | None  # [num_greedy] int64; None when no row is greedy
    random_rows: torch.Tensor | None  # [num_random] int64; None when no row samples
    temperatures: torch.Tensor | None  # [num_random, 1] float32
    top_k: torch.Tensor | None  # [num_random] int64 (vocab_size = off); None: no row uses it
    top_p: torch.Tensor | None  # [num_random] float32 (1 = off); None: no row uses it
    max_top_k: int
    """Largest k over the random rows (vocab_size when some row does not use top-k)."""
    min_p: torch.Tensor | None  # [num_random] float32 (0 = off); None: no row uses it
    seeded_rows: list[tuple[int, int, torch.Generator | None]]
    """(position among random rows, generator seed for this row's next token, the
    request's kept generator or None to make one)."""
    unseeded_rows: torch.Tensor | None  # [num_unseeded] int64, positions among random rows
    penalties: PenaltyTensors | None
    suppressed_rows: torch.Tensor | None  # [num_suppressed] int64, rows of the batch
    suppressed_token_ids: torch.Tensor | None  # [num_suppressed] int64, set to -inf (min_tokens)
    num_logprobs: list[int | None]
    """Per row: how many top alternatives to return, or None for no logprobs."""
    max_num_logprobs: int | None
    """Largest requested top-N, or None when no row asks for logprobs."""
    allowed_tokens: AllowedTokens | None = None
    """Grammar masks of the constrained rows (structured outputs); None: no row has one."""

    @property
    def all_greedy(self) -> bool:
        """True when every row takes the argmax."""
        return self.random_rows is None

    @property
    def all_random(self) -> bool:
        """True when every row samples."""
        return self.greedy_rows is None

    @property
    def is_argmax_only(self) -> bool:
        """True when one argmax over the raw logits is the whole answer (the hot path)."""
        return (
            self.all_greedy
            and self.penalties is None
            and self.suppressed_rows is None
            and self.max_num_logprobs is None
            and self.allowed_tokens is None
        )


def is_plain_greedy(params: SamplingParams) -> bool:
    """True when sampling is a bare argmax: greedy, no penalties, min_tokens or logprobs."""
    return (
        params.temperature < GREEDY_TEMPERATURE
        and not params.has_penalties
        and not params.min_tokens
        and params.logprobs is None
    )


def greedy_sampling_batch(num_rows: int, vocab_size: int) -> SamplingBatch:
    """The batch of `num_rows` plain-greedy rows (an argmax each), built in O(1) tensors."""
    return SamplingBatch(
        num_rows=num_rows, vocab_size=vocab_size, greedy_rows=None, random_rows=None,
        temperatures=None, top_k=None, top_p=None, max_top_k=vocab_size, min_p=None,
        seeded_rows=[], unseeded_rows=None, penalties=None, suppressed_rows=None,
        suppressed_token_ids=None, num_logprobs=[None] * num_rows, max_num_logprobs=None,
    )  # fmt: skip


def mix_seed(seed: int, output_index: int) -> int:
    """A 63-bit generator seed for output token `output_index` of a request seeded `seed`.

    Depends only on (seed, index), so a seeded request draws the same noise whatever its
    batch, its row or how often it was preempted and recomputed (splitmix64 finalizer).
    """
    value = (seed + (output_index + 1) * 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (value ^ (value >> 31)) >> 1


def build_sampling_batch(
    rows: Sequence[SampleSource],
    vocab_size: int,
    device: torch.device | str,
    state: SamplingState | None = None,
) -> SamplingBatch:
    """Pack the rows' sampling parameters (row i of the logits is rows[i]) into tensors.

    With a `state` (rows are then `RequestState`s), seeded rows use the requests' kept
    generators and penalties read the kept counts instead of re-counting histories.
    """
    greedy_rows: list[int] = []
    random_rows: list[int] = []
    temperatures: list[float] = []
    top_ks: list[int] = []
    top_ps: list[float] = []
    min_ps: list[float] = []
    seeded_rows: list[tuple[int, int, torch.Generator | None]] = []
    unseeded_rows: list[int] = []
    penalized_rows: list[int] = []
    suppressed_rows: list[int] = []
    suppressed_token_ids: list[int] = []
    num_logprobs: list[int | None] = []
    for row_index, row in enumerate(rows):
        params = row.sampling_params
        if params.temperature < GREEDY_TEMPERATURE:
            greedy_rows.append(row_index)
        else:
            position = len(random_rows)
            random_rows.append(row_index)
            temperatures.append(params.temperature)
            top_ks.append(params.top_k if 0 < params.top_k < vocab_size else vocab_size)
            top_ps.append(params.top_p)
            min_ps.append(params.min_p)
            if params.seed is None:
                unseeded_rows.append(position)
            else:
                generator = None if state is None else state.generator_for(row)
                seed = mix_seed(params.seed, row.num_output_tokens)
                seeded_rows.append((position, seed, generator))
        if params.has_penalties:
            penalized_rows.append(row_index)
        if params.min_tokens and row.num_output_tokens < params.min_tokens:
            eos_ids = () if params.ignore_eos else row.eos_token_ids
            for token_id in {*eos_ids, *params.stop_token_ids}:
                if 0 <= token_id < vocab_size:
                    suppressed_rows.append(row_index)
                    suppressed_token_ids.append(token_id)
        num_logprobs.append(params.logprobs)

    def as_tensor(values: list, dtype: torch.dtype) -> torch.Tensor:
        return to_device(values, dtype, device)

    num_rows = len(rows)
    has_random = bool(random_rows)
    requested = [n for n in num_logprobs if n is not None]
    uses_top_k = min(top_ks, default=vocab_size) < vocab_size
    return SamplingBatch(
        num_rows=num_rows,
        vocab_size=vocab_size,
        greedy_rows=as_tensor(greedy_rows, torch.int64) if greedy_rows else None,
        random_rows=as_tensor(random_rows, torch.int64) if has_random else None,
        temperatures=as_tensor(temperatures, torch.float32)[:, None] if has_random else None,
        top_k=as_tensor(top_ks, torch.int64) if uses_top_k else None,
        top_p=as_tensor(top_ps, torch.float32) if min(top_ps, default=1.0) < 1.0 else None,
        max_top_k=max(top_ks, default=vocab_size),
        min_p=as_tensor(min_ps, torch.float32) if max(min_ps, default=0.0) > 0.0 else None,
        seeded_rows=seeded_rows,
        unseeded_rows=as_tensor(unseeded_rows, torch.int64) if unseeded_rows else None,
        penalties=(
            _build_penalties(rows, penalized_rows, vocab_size, device, state)
            if penalized_rows
            else None
        ),
        suppressed_rows=as_tensor(suppressed_rows, torch.int64) if suppressed_rows else None,
        suppressed_token_ids=(
            as_tensor(suppressed_token_ids, torch.int64) if suppressed_rows else None
        ),
        num_logprobs=num_logprobs,
        max_num_logprobs=max(requested) if requested else None,
    )


def _build_penalties(
    rows: Sequence[SampleSource],
    penalized_rows: list[int],
    vocab_size: int,
    device: torch.device | str,
    state: SamplingState | None = None,
) -> PenaltyTensors:
    """Token counts of the penalized rows' outputs (and a mask of their prompts' tokens)."""
    params = [rows[i].sampling_params for i in penalized_rows]
    uses_repetition = any(p.repetition_penalty != 1.0 for p in params)
    count_slots = None
    prompt_mask = None
    if state is not None:
        count_slots = state.penalty_slots([rows[i] for i in penalized_rows])
        output_counts = state.output_counts[count_slots]  # [num_penalized, vocab]
        if uses_repetition:
            prompt_mask = state.prompt_masks[count_slots]
    else:
        output_counts = _count_tokens(
            [rows[i].output_token_ids for i in penalized_rows], vocab_size, device
        )
        if uses_repetition:
            prompt_ids = [rows[i].prompt_token_ids for i in penalized_rows]
            prompt_mask = _count_tokens(prompt_ids, vocab_size, device) > 0
    settings = to_device(
        [p.repetition_penalty for p in params]
        + [p.presence_penalty for p in params]
        + [p.frequency_penalty for p in params],
        torch.float32, device,
    ).view(3, len(params))  # fmt: skip
    return PenaltyTensors(
        row_indices=to_device(penalized_rows, torch.int64, device),
        repetition_penalties=settings[0],
        presence_penalties=settings[1],
        frequency_penalties=settings[2],
        prompt_token_mask=prompt_mask,
        output_token_counts=output_counts,
        count_slots=count_slots,
    )


def _count_tokens(
    token_id_lists: list[list[int]], vocab_size: int, device: torch.device | str
) -> torch.Tensor:
    """How often each vocabulary id occurs in each list; ids outside the vocab are ignored."""
    max_len = max((len(ids) for ids in token_id_lists), default=0)
    counts = torch.zeros(len(token_id_lists), vocab_size + 1, dtype=torch.float32, device=device)
    if max_len == 0:
        return counts[:, :vocab_size]
    # Pad with an extra column id (vocab_size) that is dropped after counting.
    padded = [ids + [vocab_size] * (max_len - len(ids)) for ids in token_id_lists]
    token_ids = torch.tensor(padded, dtype=torch.int64, device=device)  # [rows, max_len]
    token_ids = torch.where((token_ids >= 0) & (token_ids < vocab_size), token_ids, vocab_size)
    counts.scatter_add_(1, token_ids, torch.ones_like(token_ids, dtype=torch.float32))
    return counts[:, :vocab_size]  # [rows, vocab]
