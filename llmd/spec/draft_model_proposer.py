"""Draft-model proposals: a small model of the target's vocabulary guesses k tokens greedily.

A second `ModelRunner` runs the draft on the target's device with its own KV cache and
block pool (`DraftBlockPool`). Each step, for every decode that may draft, the draft first
catches up on the request's tokens its cache does not hold yet (its first step the whole
prompt, then the tokens accepted since, at least the last one), sampling the first guess
at the end; then k - 1 one-token passes, batched over the requests, feed each guess back
for the next. What the target rejected is simply not kept: the draft's cache holds the
longest prefix of its fed tokens that the request's tokens still agree with, and the
slots past it are written over by the next catch-up. Torch (through the runner).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from llmd.config import EngineConfig
from llmd.engine.scheduler_output import NewRequestData, ScheduledChunk, SchedulerOutput
from llmd.errors import InvalidParameterError, LLMDError
from llmd.models.loader import load_hf_config, model_shape, resolve_model_path
from llmd.runner.device import resolve_device, resolve_dtype
from llmd.runner.kv_cache import kv_bytes_per_block
from llmd.runner.model_runner import ModelRunner
from llmd.sampling_params import SamplingParams
from llmd.spec.draft_ask import DraftAsk
from llmd.spec.draft_block_pool import DraftBlockPool, draft_pool_size

logger = logging.getLogger(__name__)

GREEDY = SamplingParams(temperature=0.0)
"""The draft's sampling: its most likely token (a plain argmax, no state on the runner)."""


@dataclass(slots=True)
class DraftSequence:
    """One request as the draft's cache holds it."""

    token_ids: list[int] = field(default_factory=list)
    """The tokens fed to the draft, whose K/V sit at positions 0, 1, ... of its cache."""
    num_agreed: int = 0
    """How many of `token_ids` were the request's own tokens when fed (the rest are the
    draft's guesses, kept only while the request's tokens turn out to agree)."""
    block_ids: list[int] = field(default_factory=list)
    """The request's draft blocks (`DraftBlockPool`): they only grow until it is released."""
    num_blocks_sent: int = 0
    """How many of `block_ids` the runner was sent (a plan carries only the new ones)."""
    is_known: bool = False
    """Whether the runner holds a row for the request (it was introduced in a plan)."""


class DraftModelProposer:
    """Drafts for all of a step's decodes with a draft model, keeping its cache per request."""

    def __init__(
        self, runner: ModelRunner, pool: DraftBlockPool, max_model_len: int, max_num_tokens: int
    ) -> None:
        self.runner = runner
        self.pool = pool
        self.max_model_len = max_model_len
        """Longest context the draft computes: the target's, capped by the draft's positions."""
        self.max_num_tokens = max_num_tokens
        """Most tokens one draft forward pass computes (catch-ups are split to fit)."""
        self.sequences: dict[str, DraftSequence] = {}

    def propose_batch(self, asks: Sequence[DraftAsk]) -> list[list[int]]:
        """Each ask's greedy guesses; a failing draft pass is logged, drops every request's
        draft state (the runner dropped its rows) and drafts nothing this step, so the
        target decodes plainly instead of failing."""
        try:
            return self._propose(asks)
        except Exception:
            logger.exception("draft model step failed; drafting nothing this step")
            for request_id in list(self.sequences):
                self.release(request_id)
            return [[] for _ in asks]

    def release(self, request_id: str) -> None:
        """Free a request's draft blocks and its runner row."""
        sequence = self.sequences.pop(request_id, None)
        if sequence is None:
            return
        self.pool.free(sequence.block_ids)
        if sequence.is_known:
            self.runner.free(SchedulerOutput(finished_request_ids=[request_id]))

    # ---------------------------------------------------------------- passes

    def _propose(self, asks: Sequence[DraftAsk]) -> list[list[int]]:
        drafts: list[list[int]] = [[] for _ in asks]
        active: list[tuple[int, int]] = []  # (index into asks, draft tokens to guess)
        for index, ask in enumerate(asks):
            num_tokens = self._prepare(ask)
            if num_tokens > 0:
                active.append((index, num_tokens))
        if not active:
            return drafts
        first = self._catch_up([asks[index] for index, _ in active])
        for (index, _), token_id in zip(active, first):
            drafts[index].append(token_id)
        for position in range(1, max(num_tokens for _, num_tokens in active)):
            going = [(asks[i].request_id, drafts[i]) for i, n in active if n > position]
            guesses = self._decode(going)
            for (_, draft_ids), token_id in zip(going, guesses):
                draft_ids.append(token_id)
        return drafts

    def _prepare(self, ask: DraftAsk) -> int:
        """Roll the request's draft state back to what still agrees and give it the blocks
        for this step's guesses; returns how many it guesses (0: none, state released)."""
        token_ids = ask.token_ids
        num_tokens = min(ask.max_num_tokens, self.max_model_len - len(token_ids) + 1)
        if num_tokens <= 0:
            self.release(ask.request_id)
            return 0
        sequence = self.sequences.get(ask.request_id)
        if sequence is None:
            sequence = self.sequences[ask.request_id] = DraftSequence()
        kept = sequence.token_ids
        # At least the last token is fed again: its logits give the first guess.
        num_kept = min(sequence.num_agreed, len(token_ids) - 1)
        limit = min(len(kept), len(token_ids) - 1)
        while num_kept < limit and kept[num_kept] == token_ids[num_kept]:
            num_kept += 1
        del kept[num_kept:]
        sequence.num_agreed = num_kept
        # K/V of the request's tokens and of the guesses fed back (all but the last).
        if not self.pool.grow(sequence.block_ids, len(token_ids) + num_tokens - 1):
            self.release(ask.request_id)  # the pool is full: this request decodes plainly
            return 0
        return num_tokens

    def _catch_up(self, asks: list[DraftAsk]) -> list[int]:
        """Feed each request's tokens the draft has not seen, in passes of at most
        `max_num_tokens` tokens; returns each request's guess after its last token."""
        guesses: dict[str, int] = {}
        starts = [len(self.sequences[ask.request_id].token_ids) for ask in asks]
        while len(guesses) < len(asks):
            plan, budget = SchedulerOutput(), self.max_num_tokens
            for index, ask in enumerate(asks):
                start, end = starts[index], len(ask.token_ids)
                if start == end or budget == 0:
                    continue
                num_new = min(end - start, budget)
                chunk_ids = list(ask.token_ids[start : start + num_new])
                self._add_chunk(plan, ask.request_id, start, chunk_ids, start + num_new == end)
                starts[index] += num_new
                budget -= num_new
            output = self._execute(plan)
            for chunk in plan.chunks:
                sequence = self.sequences[chunk.request_id]
                sequence.token_ids.extend(chunk.token_ids)
                sequence.num_agreed = len(sequence.token_ids)
                if chunk.is_sampling:
                    guesses[chunk.request_id] = output[chunk.request_id]
        return [guesses[ask.request_id] for ask in asks]

    def _decode(self, going: list[tuple[str, list[int]]]) -> list[int]:
        """One pass feeding each request's latest guess; returns the next guesses."""
        plan = SchedulerOutput()
        for request_id, draft_ids in going:
            position = len(self.sequences[request_id].token_ids)
            self._add_chunk(plan, request_id, position, [draft_ids[-1]], True)
        output = self._execute(plan)
        for request_id, draft_ids in going:
            self.sequences[request_id].token_ids.append(draft_ids[-1])
        return [output[request_id] for request_id, _ in going]

    def _add_chunk(
        self, plan: SchedulerOutput, request_id: str, start: int, token_ids: list[int],
        is_sampling: bool,
    ) -> None:  # fmt: skip
        """Append a chunk of the draft's tokens (with the blocks its runner was not sent)."""
        sequence = self.sequences[request_id]
        if not sequence.is_known:
            plan.new_requests.append(NewRequestData(request_id, [], [], GREEDY))
            sequence.is_known = True
        new_block_ids = sequence.block_ids[sequence.num_blocks_sent :]
        sequence.num_blocks_sent = len(sequence.block_ids)
        chunk = ScheduledChunk(
            None, len(token_ids), is_sampling, request_id, start, token_ids, new_block_ids,
            len(sequence.block_ids),
        )  # fmt: skip
        plan.chunks.append(chunk)
        if chunk.is_decode:
            plan.num_decode_tokens += 1
        else:
            plan.num_prefill_tokens += len(token_ids)

    def _execute(self, plan: SchedulerOutput) -> dict[str, int]:
        """Run a draft pass (decodes first, as the runner wants them) and read its guesses."""
        plan.chunks.sort(key=lambda chunk: not chunk.is_decode)
        return self.runner.execute(plan).sampled_token_ids


def load_draft_proposer(
    config: EngineConfig, max_model_len: int, vocab_size: int, num_target_blocks: int
) -> DraftModelProposer:
    """Load `config.draft_model` beside a target of `vocab_size` tokens served up to
    `max_model_len`; a draft of another vocabulary (or none readable) is refused naming
    draft_model.

    Its KV pool (`draft_pool_size`) has the target's `num_target_blocks` plus room for
    every running request's guesses; on CUDA it is cut to the memory the target left.
    """
    assert config.draft_model is not None  # EngineConfig checks it for method draft
    try:
        draft_path = resolve_model_path(config.draft_model)
        hf_config = load_hf_config(draft_path)
        shape = model_shape(hf_config)
    except LLMDError as error:
        raise type(error)(error.message, "draft_model") from error
    if shape.vocab_size != vocab_size:
        raise InvalidParameterError(
            f"the draft model has a vocabulary of {shape.vocab_size} tokens and the target "
            f"{vocab_size}: a draft must share the target's tokenizer",
            "draft_model",
        )
    draft_max_len = min(max_model_len, shape.max_model_len)
    assert config.max_num_seqs is not None and config.max_num_batched_tokens is not None
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    free_bytes = None
    if device.type == "cuda":
        free_bytes = torch.cuda.mem_get_info(device)[0]
    bytes_per_block = kv_bytes_per_block(
        shape.num_layers, shape.num_kv_heads, shape.head_dim, config.block_size, dtype
    )
    num_blocks = draft_pool_size(
        num_target_blocks, config.max_num_seqs, config.num_speculative_tokens,
        config.block_size, bytes_per_block, free_bytes,
        shape.num_params * torch.empty((), dtype=dtype).element_size(),
    )  # fmt: skip
    draft_config = dataclasses.replace(
        config, model=str(draft_path), tokenizer=None, served_model_name=None,
        quantization="auto", kv_cache_dtype="auto", num_blocks=num_blocks,
        max_model_len=draft_max_len, speculative_method=None, draft_model=None,
    )  # fmt: skip
    runner = ModelRunner(
        draft_config, draft_path, hf_config, shape, draft_max_len, config.max_num_batched_tokens
    )
    logger.info(
        "draft model %s: %d layers, %d KV blocks of %d tokens",
        config.draft_model, shape.num_layers, num_blocks, config.block_size,
    )  # fmt: skip
    pool = DraftBlockPool(num_blocks, config.block_size)
    return DraftModelProposer(runner, pool, draft_max_len, config.max_num_batched_tokens)
