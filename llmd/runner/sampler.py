"""Vectorized next-token sampling: penalties, temperature, top-k, top-p, min-p, logprobs.

One batched pass per step keeps sampling cheap next to the model; the all-greedy case is a
single argmax. Randomness uses the exponential race (argmax of probs / q with q ~ Exp(1)),
which needs only per-token noise, so a seeded request's noise can come from its own
generator seeded by (seed, output index) and stays the same in any batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from llmd.outputs import TokenLogprob
from llmd.runner.row_argmax import RowArgmax, torch_row_argmax
from llmd.runner.sampling_batch import (
    PenaltyTensors,
    SampleRow,
    SamplingBatch,
    build_sampling_batch,
)
from llmd.runner.token_bitmask import apply_allowed_tokens

__all__ = [
    "SampleRow",
    "Sampler",
    "SamplerOutput",
    "SamplingBatch",
    "apply_min_p",
    "apply_penalties",
    "build_sampling_batch",
    "top_k_top_p_sorted_probs",
]


@dataclass
class SamplerOutput:
    """The sampled token of each row and, for rows that asked, its logprobs.

    Logprobs are raw: log_softmax of the model's logits before penalties, temperature and
    truncation (vLLM's default), so values are comparable across sampling settings; a
    grammar mask (structured outputs) comes first, so they are the constrained ones.
    """

    token_ids: list[int]
    logprobs: list[TokenLogprob | None]


@dataclass
class DeviceSample:
    """A step's samples still on the device: reading them is the step's only host sync."""

    token_ids: torch.Tensor  # [num_rows] int64
    packed_logprobs: torch.Tensor | None  # [num_rows, 3 + 2 * max_n] float64; None: none asked

    def read(self, batch: SamplingBatch) -> SamplerOutput:
        """Copy to the host (waits for the device) and unpack."""
        if self.packed_logprobs is None:
            return SamplerOutput(self.token_ids.tolist(), [None] * batch.num_rows)
        return SamplerOutput(*unpack_logprobs(self.packed_logprobs.tolist(), batch))


class Sampler:
    """Samples one token per row from float32 logits according to a `SamplingBatch`."""

    def __init__(self, seed: int, row_argmax: RowArgmax = torch_row_argmax) -> None:
        """`row_argmax` picks greedy rows' tokens (the runner passes the C++ one on CPU)."""
        self._seed = seed
        self._row_argmax = row_argmax
        self._generators: dict[torch.device, torch.Generator] = {}

    def __call__(self, logits: torch.Tensor, batch: SamplingBatch) -> SamplerOutput:
        """Sample from `logits` [num_rows, vocab] (float32); rows match the batch's rows."""
        return self.sample(logits, batch).read(batch)

    def sample(self, logits: torch.Tensor, batch: SamplingBatch) -> DeviceSample:
        """Sample on the device without waiting for it: ids (and logprobs) stay there."""
        if batch.is_argmax_only:
            return DeviceSample(self._row_argmax(logits), None)
        logits = logits.float()
        if batch.allowed_tokens is not None:  # first: logprobs are the constrained ones
            logits = apply_allowed_tokens(logits, batch.allowed_tokens)
        raw_logprobs = None
        if batch.max_num_logprobs is not None:
            raw_logprobs = torch.log_softmax(logits, dim=-1)  # [num_rows, vocab]
        if batch.penalties is not None:
            logits = apply_penalties_to_rows(logits, batch.penalties)
        if batch.suppressed_rows is not None:
            logits = logits.index_put(
                (batch.suppressed_rows, batch.suppressed_token_ids),
                torch.tensor(float("-inf"), device=logits.device),
            )
        token_ids = self._choose(logits, batch)  # [num_rows] int64
        if raw_logprobs is None:
            return DeviceSample(token_ids, None)
        return DeviceSample(token_ids, _pack_logprobs(raw_logprobs, token_ids, batch))

    def _choose(self, logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
        if batch.all_greedy:
            return self._row_argmax(logits)
        if batch.all_random:
            return self._sample(logits, batch)
        token_ids = torch.empty(batch.num_rows, dtype=torch.int64, device=logits.device)
        token_ids[batch.greedy_rows] = self._row_argmax(logits[batch.greedy_rows])
        token_ids[batch.random_rows] = self._sample(logits[batch.random_rows], batch)
        return token_ids

    def _sample(self, logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
        """Sample the random rows: `logits` is [num_random, vocab]; returns [num_random]."""
        logits = logits / batch.temperatures
        noise = self._exponential_noise(logits, batch)  # [num_random, vocab]
        if batch.top_k is None and batch.top_p is None:
            probs = torch.softmax(logits, dim=-1)
            if batch.min_p is not None:
                probs = apply_min_p(probs, batch.min_p)
            return (probs / noise).argmax(dim=-1)
        if batch.top_k is not None and batch.max_top_k < logits.shape[1]:
            # Every row keeps at most max_top_k tokens: a partial sort is enough.
            sorted_logits, sorted_ids = logits.topk(batch.max_top_k, dim=-1)  # [num_random, k]
        else:
            sorted_logits, sorted_ids = logits.sort(dim=-1, descending=True)  # [num_random, V]
        sorted_probs = top_k_top_p_sorted_probs(sorted_logits, batch.top_k, batch.top_p)
        if batch.min_p is not None:
            sorted_probs = apply_min_p(sorted_probs, batch.min_p)
        sorted_noise = noise.gather(1, sorted_ids)
        positions = (sorted_probs / sorted_noise).argmax(dim=-1, keepdim=True)  # [num_random, 1]
        return sorted_ids.gather(1, positions).squeeze(1)

    def _exponential_noise(self, logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
        """Exp(1) noise [num_random, vocab]: seeded rows from (seed, index), others in one draw."""
        device = logits.device
        # Uniform draws turned into Exp(1) by -log(u): several times cheaper than exponential_.
        uniform = torch.empty_like(logits)
        if batch.unseeded_rows is not None:
            generator = self._engine_generator(device)
            if not batch.seeded_rows:
                uniform.uniform_(generator=generator)
            else:
                draw = torch.empty(
                    len(batch.unseeded_rows), logits.shape[1], dtype=logits.dtype, device=device
                )
                uniform[batch.unseeded_rows] = draw.uniform_(generator=generator)
        for position, generator_seed, kept in batch.seeded_rows:
            generator = kept if kept is not None else torch.Generator(device=device)
            generator.manual_seed(generator_seed)  # a reset of the kept state, no allocation
            uniform[position] = torch.empty(
                logits.shape[1], dtype=logits.dtype, device=device
            ).uniform_(generator=generator)
        # u = 0 gives +inf (that token loses); the floor keeps a zero-probability token at
        # 0 / q = 0 rather than NaN should a draw give q = 0.
        return uniform.log_().neg_().clamp_min_(torch.finfo(logits.dtype).tiny)

    def _engine_generator(self, device: torch.device) -> torch.Generator:
        generator = self._generators.get(device)
        if generator is None:
            generator = torch.Generator(device=device)
            generator.manual_seed(self._seed)
            self._generators[device] = generator
        return generator


def apply_penalties(
    logits: torch.Tensor,
    prompt_token_mask: torch.Tensor | None,
    output_token_counts: torch.Tensor,
    repetition_penalties: torch.Tensor,
    presence_penalties: torch.Tensor,
    frequency_penalties: torch.Tensor,
) -> torch.Tensor:
    """Return penalized logits [rows, vocab]; the inputs are left unchanged.

    Repetition (HF/vLLM): tokens seen in prompt or output have positive logits divided and
    negative ones multiplied by the penalty. Frequency and presence (OpenAI): subtract
    count * frequency and, for tokens present in the output, presence.
    """
    output_mask = output_token_counts > 0  # [rows, vocab]
    seen_mask = output_mask if prompt_token_mask is None else output_mask | prompt_token_mask
    repetition = repetition_penalties[:, None]  # [rows, 1]
    penalized = torch.where(logits > 0, logits / repetition, logits * repetition)
    logits = torch.where(seen_mask, penalized, logits)
    logits = logits - frequency_penalties[:, None] * output_token_counts
    return logits - presence_penalties[:, None] * output_mask.float()


def apply_penalties_to_rows(logits: torch.Tensor, penalties: PenaltyTensors) -> torch.Tensor:
    """Penalize the rows `penalties` names in `logits` [num_rows, vocab]; returns a new tensor."""
    rows = penalties.row_indices
    penalized = apply_penalties(
        logits[rows],
        penalties.prompt_token_mask,
        penalties.output_token_counts,
        penalties.repetition_penalties,
        penalties.presence_penalties,
        penalties.frequency_penalties,
    )  # [num_penalized, vocab]
    return logits.index_put((rows,), penalized)


def top_k_top_p_sorted_probs(
    sorted_logits: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None
) -> torch.Tensor:
    """Probabilities [rows, n] of descending-sorted logits, zero outside top-k and top-p.

    Top-p keeps the smallest prefix whose mass reaches p, computed after top-k truncation;
    the most likely token is always kept. The result is not renormalized (the sampler and
    min-p only need ratios within a row).
    """
    num_sorted = sorted_logits.shape[1]  # the whole vocab, or the largest k after a topk
    if top_k is not None:
        positions = torch.arange(num_sorted, device=sorted_logits.device)  # [n]
        outside_k = positions[None, :] >= top_k[:, None]  # [rows, n]
        sorted_logits = sorted_logits.masked_fill(outside_k, float("-inf"))
    sorted_probs = torch.softmax(sorted_logits, dim=-1)
    if top_p is not None:
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # [rows, n]
        outside_p = (mass_before >= top_p[:, None]) & (top_p[:, None] < 1.0)
        sorted_probs = sorted_probs.masked_fill(outside_p, 0.0)
    return sorted_probs


def apply_min_p(probs: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Zero probabilities [rows, vocab] below min_p times the row's largest probability."""
    threshold = min_p[:, None] * probs.amax(dim=-1, keepdim=True)  # [rows, 1]
    return probs.masked_fill(probs < threshold, 0.0)


def _pack_logprobs(
    raw_logprobs: torch.Tensor, token_ids: torch.Tensor, batch: SamplingBatch
) -> torch.Tensor:
    """Sampled id, its logprob and rank, top-N ids and logprobs per row, in one tensor.

    One [num_rows, 3 + 2 * max_n] float64 tensor, so the host reads it in one transfer.
    """
    sampled = raw_logprobs.gather(1, token_ids[:, None])  # [num_rows, 1]
    ranks = (raw_logprobs > sampled).sum(dim=-1, keepdim=True) + 1  # [num_rows, 1]
    max_n = batch.max_num_logprobs or 0
    top_logprobs, top_ids = raw_logprobs.topk(max_n, dim=-1)  # [num_rows, max_n]
    return torch.cat(
        [
            token_ids[:, None].double(),
            sampled.double(),
            ranks.double(),
            top_ids.double(),
            top_logprobs.double(),
        ],
        dim=1,
    )


def unpack_logprobs(
    packed: list[list[float]], batch: SamplingBatch
) -> tuple[list[int], list[TokenLogprob | None]]:
    """Token ids and per-row `TokenLogprob`s from `_pack_logprobs`'s rows, read on the host."""
    max_n = batch.max_num_logprobs or 0
    token_id_list: list[int] = []
    results: list[TokenLogprob | None] = []
    for row, num in zip(packed, batch.num_logprobs):
        token_id = int(row[0])
        token_id_list.append(token_id)
        if num is None:
            results.append(None)
            continue
        top_ids, top_values = row[3 : 3 + num], row[3 + max_n : 3 + max_n + num]
        # A grammar mask leaves fewer tokens possible than asked for: the rest (-inf) go.
        num_possible = sum(1 for value in top_values if value != -math.inf)
        results.append(
            TokenLogprob(
                token_id=token_id,
                logprob=row[1],
                rank=int(row[2]),
                top_token_ids=tuple(int(i) for i in top_ids[:num_possible]),
                top_logprobs=tuple(top_values[:num_possible]),
            )
        )
    return token_id_list, results
