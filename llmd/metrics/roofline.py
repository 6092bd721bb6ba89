"""Back-of-envelope hardware estimates: bytes a decode step reads, FLOPs a prefill does.

Decode is memory-bound (every step reads the weights it multiplies plus the batch's KV
cache) and prefill compute-bound (2 FLOPs per multiplied parameter per token), so these
two numbers tell `llmd top` how close the engine runs to the device's peaks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelCost:
    """Where a model's parameters are used: per computed token, per sampled row, or looked up.

    The input embedding is a table lookup (no FLOPs, one row read per token) and the
    output projection runs only on the rows that sample, so counting them as dense
    per-token work overstates prefill FLOPs and (untied) decode bytes.
    """

    num_params: int
    """Distinct parameters (a tied embedding counted once)."""
    vocab_size: int = 0
    hidden_size: int = 0
    is_tied: bool = False
    """True when the output projection reuses the input embedding table."""

    @property
    def num_table_params(self) -> int:
        """Parameters of one vocabulary x hidden table (the embedding or the output projection)."""
        return self.vocab_size * self.hidden_size

    @property
    def num_body_params(self) -> int:
        """Parameters multiplied once per computed token: every layer and the final norm."""
        num_tables = 1 if self.is_tied else 2
        return max(0, self.num_params - num_tables * self.num_table_params)

    def step_flops(self, num_tokens: int, num_sampled_rows: int) -> int:
        """Matmul FLOPs of a step: the body on every token, the projection on sampled rows."""
        return 2 * (self.num_body_params * num_tokens + self.num_table_params * num_sampled_rows)

    def decode_step_bytes(
        self, dtype_bytes: int, num_seqs: int, kv_context_tokens: int, kv_bytes_per_token: int
    ) -> int:
        """Bytes a decode step reads: the body and output projection once, one embedding row
        per sequence, and the K/V of every context token."""
        weight_params = self.num_body_params + self.num_table_params
        embedding_params = num_seqs * self.hidden_size
        kv_bytes = kv_context_tokens * kv_bytes_per_token
        return (weight_params + embedding_params) * dtype_bytes + kv_bytes
