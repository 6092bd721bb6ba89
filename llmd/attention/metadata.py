"""Per-step attention metadata built by the model runner and read by every backend.

It is the whole contract between the runner's flat token batch and the paged KV cache:
a backend needs nothing else to store new K/V and attend over each request's context.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AttentionMetadata:
    """Where each new token's K/V goes and which cached tokens each query attends to.

    Sequences are ordered decodes first (query length 1), then prefill chunks, so that a
    backend can run one decode kernel over `[:num_decode_seqs]` and a prefill kernel over
    the rest. Token t of sequence i sits at position `seq_lens[i] - query_len_i + t` and is
    causal: it sees every cached position below it and itself.
    """

    num_decode_seqs: int
    """Sequences with exactly one new token, first in the batch."""
    num_prefill_seqs: int
    """Sequences with a chunk of new tokens (prompt chunks or recomputation), after decodes."""
    num_tokens: int
    """Total new tokens in the step (rows of q/k/v)."""
    slot_mapping: torch.Tensor
    """[num_tokens] int64: cache slot (block_id * block_size + offset) of each new token."""
    query_start_loc: torch.Tensor
    """[num_seqs + 1] int32: cumulative query lengths (row offsets into q)."""
    seq_lens: torch.Tensor
    """[num_seqs] int32: context length after this step (cached prefix + new tokens)."""
    block_tables: torch.Tensor
    """[num_seqs, max_blocks_per_seq] int32: KV block ids; entries past a sequence's
    context are padding (0) and must never be read."""
    max_query_len: int
    """Longest query chunk in the step."""
    max_seq_len: int
    """Longest context in the step."""
    query_lens_cpu: list[int]
    """Query length of each sequence, on the host (for loops and launch grids)."""
    seq_lens_cpu: list[int]
    """Context length of each sequence, on the host."""

    @property
    def num_seqs(self) -> int:
        """Number of sequences in the step."""
        return self.num_decode_seqs + self.num_prefill_seqs

    @property
    def num_decode_tokens(self) -> int:
        """Tokens belonging to decode sequences (one each)."""
        return self.num_decode_seqs
