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
    num_experts: int = 0
    """Routed experts per MoE layer (0: a dense model)."""
    num_experts_per_token: int = 0
    num_moe_layers: int = 0
    num_params_per_expert: int = 0

    @property
    def num_routed_params(self) -> int:
        """Parameters of every routed expert of every MoE layer (0 for a dense model)."""
        return self.num_moe_layers * self.num_experts * self.num_params_per_expert

    @property
    def num_active_params_per_token(self) -> int:
        """Body parameters one token multiplies: the dense ones and its top-k experts."""
        routed = self.num_moe_layers * self.num_experts_per_token * self.num_params_per_expert
        return self.num_body_params + routed

    @property
    def num_table_params(self) -> int:
        """Parameters of one vocabulary x hidden table (the embedding or the output projection)."""
        return self.vocab_size * self.hidden_size

    @property
    def num_body_params(self) -> int:
        """Parameters every computed token multiplies: every layer and the final norm, less
        the routed experts (a token uses only its top-k of those)."""
        num_tables = 1 if self.is_tied else 2
        return max(0, self.num_params - num_tables * self.num_table_params - self.num_routed_params)

    def step_flops(self, num_tokens: int, num_sampled_rows: int) -> int:
        """Matmul FLOPs of a step: the active body on every token, the projection on sampled
        rows."""
        per_token = self.num_active_params_per_token
        return 2 * (per_token * num_tokens + self.num_table_params * num_sampled_rows)

    def decode_step_bytes(
        self,
        dtype_bytes: int,
        num_seqs: int,
        kv_context_tokens: int,
        kv_bytes_per_token: int,
        num_experts_touched: int = 0,
    ) -> int:
        """Bytes a decode step reads: the dense body and output projection once, each
        (layer, expert) pair its tokens were routed to once, one embedding row per
        sequence, and the K/V of every context token."""
        expert_params = num_experts_touched * self.num_params_per_expert
        weight_params = self.num_body_params + expert_params + self.num_table_params
        embedding_params = num_seqs * self.hidden_size
        kv_bytes = kv_context_tokens * kv_bytes_per_token
        return (weight_params + embedding_params) * dtype_bytes + kv_bytes
