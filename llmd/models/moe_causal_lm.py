"""The Llama decoder with mixture-of-experts MLPs: the base of every MoE architecture.

Attention, norms and the residual stream are the dense decoder's (llama.py); only the
sparse layers' MLP changes, so each architecture says how its config reads (`moe_spec`)
and how its checkpoint names its experts (`checkpoint_name`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from llmd.layers.routing_stats import RoutingStats
from llmd.models.llama import LlamaForCausalLM, MlpFactory, dense_mlp
from llmd.models.moe_spec import MoeSpec
from llmd.models.sparse_moe_block import SparseMoeBlock


class MoeForCausalLM(LlamaForCausalLM):
    """A decoder whose sparse layers route each token to top-k experts."""

    can_capture_cuda_graphs = False
    """The experts' grouping reads per-expert counts on the host, which a graph cannot."""

    @classmethod
    def moe_spec(cls, hf_config: Any) -> MoeSpec:
        """The experts the config describes (each architecture reads its own fields)."""
        raise NotImplementedError

    @classmethod
    def checkpoint_name(cls, name: str) -> str:
        """The llmd name of a checkpoint tensor (Mixtral renames its experts)."""
        return name

    def mlp_factory(self) -> MlpFactory:
        """Sparse layers get a `SparseMoeBlock`, the others the dense MLP."""
        spec = self.moe_spec(self.config)
        self.routing_stats = RoutingStats(spec.num_moe_layers, spec.num_experts)
        moe_index_of = {layer: i for i, layer in enumerate(spec.sparse_layer_indices)}

        def make_mlp(hf_config: Any, layer_index: int) -> nn.Module:
            if layer_index not in moe_index_of:
                return dense_mlp(hf_config)
            return SparseMoeBlock(
                spec, hf_config.hidden_size, hf_config.hidden_act, self.routing_stats,
                moe_index_of[layer_index],
            )  # fmt: skip

        return make_mlp

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load HF-named tensors, each renamed by `checkpoint_name` first."""
        super().load_weights((self.checkpoint_name(name), tensor) for name, tensor in weights)
