"""Mixtral checkpoints: Mistral's attention with routed experts in every layer.

The k largest router logits, softmaxed over those k (the same weights as a softmax over
all experts renormalised over the chosen k); experts are stored as
`block_sparse_moe.experts.E.w1/w3/w2` (gate, up, down), renamed on load.
"""

from __future__ import annotations

import re
from typing import Any

from llmd.models.moe_causal_lm import MoeForCausalLM
from llmd.models.moe_spec import MoeSpec

_EXPERT_PROJECTIONS = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}
_EXPERT_NAME = re.compile(r"\.experts\.(\d+)\.(w[123])\.")


class MixtralForCausalLM(MoeForCausalLM):
    """Mixtral (e.g. Mixtral-8x7B)."""

    @classmethod
    def moe_spec(cls, hf_config: Any) -> MoeSpec:
        """Experts from `num_local_experts`, `num_experts_per_tok`, `intermediate_size`."""
        return MoeSpec(
            num_experts=hf_config.num_local_experts,
            num_experts_per_token=hf_config.num_experts_per_tok,
            intermediate_size=hf_config.intermediate_size,
            renormalize=True,
            sparse_layer_indices=tuple(range(hf_config.num_hidden_layers)),
        )

    @classmethod
    def checkpoint_name(cls, name: str) -> str:
        """`block_sparse_moe.` -> `mlp.`, and w1/w3/w2 -> gate/up/down_proj."""
        name = name.replace(".block_sparse_moe.", ".mlp.")
        return _EXPERT_NAME.sub(
            lambda match: f".experts.{match[1]}.{_EXPERT_PROJECTIONS[match[2]]}.", name
        )
