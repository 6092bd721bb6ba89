"""Per-request sampling state kept across steps: seeded generators and penalty counts.

Rebuilding it every step made a new `torch.Generator` per seeded row and re-counted every
penalized request's whole output history. Here a request gets its generator and its
count row once; each step re-seeds the generator (a host-side reset, no allocation) and
adds the newly sampled token to the counts on the device, so the work per step no longer
grows with the output length and needs no host copy of the sampled ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import torch

from llmd.runner.host_transfer import to_device

MIN_PENALTY_SLOTS = 8
"""Count rows allocated at first use; the table doubles when full."""


class KeptRequest(Protocol):
    """What the state reads of a request: its id and, for a count row, its history."""

    request_id: str

    @property
    def prompt_token_ids(self) -> list[int]: ...

    @property
    def output_token_ids(self) -> list[int]: ...


class SamplingState:
    """Generators of seeded requests and output-token counts of penalized ones, by request.

    A request's state outlives its preemption (its counts stay exact) and goes when a plan
    names it finished (`release`).
    """

    def __init__(self, vocab_size: int, device: torch.device) -> None:
        self.vocab_size = vocab_size
        self.device = torch.device(device)
        self._generators: dict[str, torch.Generator] = {}
        self._slots: dict[str, int] = {}
        self._free_slots: list[int] = []
        self.output_counts: torch.Tensor | None = None  # [num_slots, vocab] float32
        self.prompt_masks: torch.Tensor | None = None  # [num_slots, vocab] bool
        self.num_generators_made = 0
        self.num_histories_counted = 0

    def generator_for(self, request: KeptRequest) -> torch.Generator:
        """The request's own generator, made on first use and kept until it finishes."""
        generator = self._generators.get(request.request_id)
        if generator is None:
            generator = torch.Generator(device=self.device)
            self._generators[request.request_id] = generator
            self.num_generators_made += 1
        return generator

    def penalty_slots(self, requests: Sequence[KeptRequest]) -> torch.Tensor:
        """Count rows of the requests ([len(requests)] int64 on the device).

        A request seen for the first time gets a row filled from its history (prompt mask
        and output counts); later steps only add sampled tokens (`record_sampled`).
        """
        slots = []
        for request in requests:
            slot = self._slots.get(request.request_id)
            if slot is None:
                slot = self._new_slot(request)
            slots.append(slot)
        return to_device(slots, torch.int64, self.device)

    def record_sampled(
        self, slots: torch.Tensor, token_ids: torch.Tensor, weights: torch.Tensor | None = None
    ) -> None:
        """Add each row's sampled token to its count row, on the device (no host sync).

        `weights` ([rows] float32, 0 or 1) leave out a verify step's rejected samples;
        None counts every row.
        """
        if weights is None:
            weights = torch.ones(slots.shape[0], dtype=torch.float32, device=self.device)
        self.output_counts.index_put_((slots, token_ids), weights, accumulate=True)

    def release(self, request_ids: Iterable[str]) -> None:
        """Forget the given finished requests (ids without state are ignored)."""
        for request_id in request_ids:
            self._generators.pop(request_id, None)
            slot = self._slots.pop(request_id, None)
            if slot is not None:
                self._free_slots.append(slot)

    @property
    def num_requests(self) -> int:
        """Requests with state kept."""
        return len(self._generators.keys() | self._slots.keys())

    def _new_slot(self, request: KeptRequest) -> int:
        if not self._free_slots:
            self._grow()
        slot = self._free_slots.pop()
        self._slots[request.request_id] = slot
        history = [t for t in request.output_token_ids if 0 <= t < self.vocab_size]
        prompt = [t for t in request.prompt_token_ids if 0 <= t < self.vocab_size]
        self.output_counts[slot].zero_()
        if history:
            ids = to_device(history, torch.int64, self.device)
            self.output_counts[slot].index_add_(
                0, ids, torch.ones(len(history), dtype=torch.float32, device=self.device)
            )
        self.prompt_masks[slot].zero_()
        if prompt:
            self.prompt_masks[slot, to_device(prompt, torch.int64, self.device)] = True
        self.num_histories_counted += 1
        return slot

    def _grow(self) -> None:
        """Double the count table (or create it), keeping existing rows."""
        old = 0 if self.output_counts is None else self.output_counts.shape[0]
        new = max(MIN_PENALTY_SLOTS, 2 * old)
        counts = torch.zeros(new, self.vocab_size, dtype=torch.float32, device=self.device)
        masks = torch.zeros(new, self.vocab_size, dtype=torch.bool, device=self.device)
        if old:
            counts[:old] = self.output_counts
            masks[:old] = self.prompt_masks
        self.output_counts, self.prompt_masks = counts, masks
        self._free_slots.extend(range(new - 1, old - 1, -1))
