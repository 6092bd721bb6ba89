"""The experts of a mixture-of-experts layer run as one GEMM per touched expert.

Tokens are grouped by expert (a stable argsort of the flat top-k ids, counts by bincount),
each touched expert multiplies its gathered rows once, and the weighted rows are added back
to their tokens with one index_add_: no Python loop over tokens, and an expert that got no
token costs nothing, which is what makes a decode step read only the experts it uses.
With Triton layers (CUDA) both projections are grouped GEMMs over all experts at once, and
with the C++ CPU ops (llmd/layers/csrc/moe_grouped_linear.cpp) one call each runs every
touched expert's rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from llmd.attention.cpu_extension import CPU_OP_DTYPES
from llmd.layers.activation import GatedActivation
from llmd.layers.kernel_config import KernelConfig
from llmd.layers.routing_stats import RoutingStats


class ExpertGemm(Protocol):
    """How one expert's projections multiply its rows; the stacked weights by default, a
    packed or quantized form once `FusedMoE.expert_gemm` is set to one."""

    def gate_up(self, expert_id: int, rows: torch.Tensor) -> torch.Tensor:
        """[n, hidden_size] -> [n, 2 * intermediate_size] (gate | up)."""

    def down(self, expert_id: int, rows: torch.Tensor) -> torch.Tensor:
        """[n, intermediate_size] -> [n, hidden_size]."""


class FusedMoE(nn.Module):
    """The routed experts of one MoE layer, with HF's stacked weight layout.

    `gate_up_proj` [num_experts, 2 * intermediate, hidden] holds each expert's gate then up
    rows and `down_proj` [num_experts, hidden, intermediate] its down projection, as
    transformers keeps them in memory; checkpoints' per-expert tensors load into slices.
    """

    def __init__(
        self,
        num_experts: int,
        hidden_size: int,
        intermediate_size: int,
        hidden_act: str,
        routing_stats: RoutingStats | None = None,
        moe_layer_index: int = 0,
    ) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.intermediate_size = intermediate_size
        self.gate_up_proj: nn.Parameter | None = nn.Parameter(
            torch.empty(num_experts, 2 * intermediate_size, hidden_size)
        )
        self.down_proj: nn.Parameter | None = nn.Parameter(
            torch.empty(num_experts, hidden_size, intermediate_size)
        )
        self.act = GatedActivation(hidden_act)
        self.expert_gemm: ExpertGemm | None = None
        """Replaces the stacked weights' F.linear when set (oneDNN-packed on CPU)."""
        self.routing_stats = routing_stats
        self.moe_layer_index = moe_layer_index
        self.kernel_config = KernelConfig()
        self._grouped_gemm: Callable[..., torch.Tensor] | None = None
        self._cpu_grouped_linear: Callable[..., None] | None = None

    def use_kernel_config(self, config: KernelConfig) -> None:
        """Run the stacked experts as two Triton grouped GEMMs when `config` selects Triton
        (no host round trip), as two C++ grouped linears when it selects the CPU ops;
        otherwise one GEMM per touched expert."""
        self.kernel_config = config
        self._grouped_gemm = self._cpu_grouped_linear = None
        if config.use_triton:
            from llmd.kernels.grouped_gemm import grouped_gemm

            self._grouped_gemm = grouped_gemm
        if config.use_cpu_ops:
            from llmd.attention.cpu_extension import load_cpu_ops

            self._cpu_grouped_linear = load_cpu_ops().moe_grouped_linear

    @property
    def uses_cpu_grouped_linear(self) -> bool:
        """Whether the stacked weights run on the C++ grouped linear (so they stay stacked,
        not repacked per expert): CPU ops on, plain float32 or bfloat16 weights."""
        return (
            self._cpu_grouped_linear is not None
            and self.expert_gemm is None
            and self.gate_up_proj is not None
            and self.gate_up_proj.dtype in CPU_OP_DTYPES
        )

    def gate_up(self, expert_id: int, rows: torch.Tensor) -> torch.Tensor:
        """One expert's fused gate/up projection of its rows."""
        if self.expert_gemm is not None:
            return self.expert_gemm.gate_up(expert_id, rows)
        assert self.gate_up_proj is not None
        return F.linear(rows, self.gate_up_proj[expert_id])

    def down(self, expert_id: int, rows: torch.Tensor) -> torch.Tensor:
        """One expert's down projection of its activated rows."""
        if self.expert_gemm is not None:
            return self.expert_gemm.down(expert_id, rows)
        assert self.down_proj is not None
        return F.linear(rows, self.down_proj[expert_id])

    def forward(
        self,
        hidden: torch.Tensor,  # [num_tokens, hidden_size]
        weights: torch.Tensor,  # [num_tokens, top_k] routing weights
        expert_ids: torch.Tensor,  # [num_tokens, top_k] int64
    ) -> torch.Tensor:  # [num_tokens, hidden_size]
        """sum_k weights[t, k] * expert_{ids[t, k]}(hidden[t]) for every token t."""
        top_k = expert_ids.shape[1]
        flat_ids = expert_ids.reshape(-1)  # [num_tokens * top_k]
        counts = torch.bincount(flat_ids, minlength=self.num_experts)  # [num_experts]
        order = torch.argsort(flat_ids, stable=True)  # slots grouped by expert, ascending
        token_of_slot = order // top_k  # [num_slots]: the token each sorted slot came from
        rows = hidden.index_select(0, token_of_slot)  # [num_slots, hidden_size]
        if self._grouped_gemm is not None and self.expert_gemm is None:
            expert_out = self._grouped_experts(rows, counts)
        elif self.uses_cpu_grouped_linear and rows.dtype == self.gate_up_proj.dtype:  # type: ignore[union-attr]
            expert_out = self._cpu_grouped_experts(rows, counts)
        else:
            expert_out = self._expert_by_expert(rows, counts)
        slot_weights = weights.reshape(-1)[order].to(expert_out.dtype)  # [num_slots]
        expert_out.mul_(slot_weights[:, None])
        out = torch.zeros_like(hidden)
        out.index_add_(0, token_of_slot, expert_out)
        return out

    def _expert_by_expert(self, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """One GEMM per touched expert over its run of the sorted rows (counts read on the
        host); [num_slots, hidden_size] -> [num_slots, hidden_size]."""
        num_rows_of = counts.tolist()
        if self.routing_stats is not None:
            num_touched = self.num_experts - num_rows_of.count(0)
            self.routing_stats.record(self.moe_layer_index, counts, num_touched)
        segments = []  # (expert, first slot, end slot) of each touched expert
        start = 0
        for expert_id, num_rows in enumerate(num_rows_of):
            if num_rows:
                segments.append((expert_id, start, start + num_rows))
                start += num_rows
        gate_up = rows.new_empty(rows.shape[0], 2 * self.intermediate_size)
        for expert_id, first, end in segments:
            gate_up[first:end] = self.gate_up(expert_id, rows[first:end])
        activated = self.act(gate_up)  # [num_slots, intermediate_size]
        expert_out = torch.empty_like(rows)  # [num_slots, hidden_size]
        for expert_id, first, end in segments:
            expert_out[first:end] = self.down(expert_id, activated[first:end])
        return expert_out

    def _grouped_experts(self, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Both projections as grouped GEMMs over the stacked weights, counts kept on the
        device (the touched count too, read with the step's samples)."""
        assert self._grouped_gemm is not None
        if self.routing_stats is not None:
            self.routing_stats.record(self.moe_layer_index, counts, (counts > 0).sum())
        gate_up = self._grouped_gemm(rows, self.gate_up_proj, counts)  # [num_slots, 2 I]
        return self._grouped_gemm(self.act(gate_up), self.down_proj, counts)

    def _cpu_grouped_experts(self, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Both projections as one C++ call each over every touched expert's run of the
        sorted rows; [num_slots, hidden_size] -> [num_slots, hidden_size]."""
        assert self._cpu_grouped_linear is not None
        assert self.gate_up_proj is not None and self.down_proj is not None
        if self.routing_stats is not None:
            num_touched = int(torch.count_nonzero(counts))
            self.routing_stats.record(self.moe_layer_index, counts, num_touched)
        offsets = counts.new_zeros(self.num_experts + 1)  # [num_experts + 1] slot offsets
        torch.cumsum(counts, 0, out=offsets[1:])
        gate_up = rows.new_empty(rows.shape[0], 2 * self.intermediate_size)  # [num_slots, 2 I]
        self._cpu_grouped_linear(gate_up, rows, self.gate_up_proj, offsets)
        activated = self.act(gate_up).contiguous()  # [num_slots, intermediate_size]
        expert_out = torch.empty_like(rows)  # [num_slots, hidden_size]
        self._cpu_grouped_linear(expert_out, activated, self.down_proj, offsets)
        return expert_out


def fused_moe_reference(
    hidden: torch.Tensor,  # [num_tokens, hidden_size]
    weights: torch.Tensor,  # [num_tokens, top_k]
    expert_ids: torch.Tensor,  # [num_tokens, top_k]
    gate_up_proj: torch.Tensor,  # [num_experts, 2 * intermediate, hidden_size]
    down_proj: torch.Tensor,  # [num_experts, hidden_size, intermediate]
) -> torch.Tensor:
    """Slow, obviously correct SiLU experts: token by token, choice by choice (tests only)."""
    out = torch.zeros_like(hidden, dtype=torch.float32)
    for token in range(hidden.shape[0]):
        for choice in range(expert_ids.shape[1]):
            expert_id = int(expert_ids[token, choice])
            gate, up = (gate_up_proj[expert_id].float() @ hidden[token].float()).chunk(2)
            expert_out = down_proj[expert_id].float() @ (F.silu(gate) * up)
            out[token] += float(weights[token, choice]) * expert_out
    return out.to(hidden.dtype)
