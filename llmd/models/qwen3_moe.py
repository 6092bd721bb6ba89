"""Qwen3-MoE checkpoints: Qwen3's attention (q/k norm) with routed experts.

Softmax over all experts, top-k, renormalised where `norm_topk_prob` is set; the layers
`mlp_only_layers` names, and those off the `decoder_sparse_step`, keep a dense MLP.
"""

from __future__ import annotations

from typing import Any

from llmd.models.moe_causal_lm import MoeForCausalLM
from llmd.models.moe_spec import MoeSpec, qwen_moe_spec


class Qwen3MoeForCausalLM(MoeForCausalLM):
    """Qwen3-MoE (e.g. Qwen3-30B-A3B)."""

    use_qk_norm = True

    @classmethod
    def moe_spec(cls, hf_config: Any) -> MoeSpec:
        """Experts from `num_experts`, `num_experts_per_tok`, `moe_intermediate_size`."""
        return qwen_moe_spec(hf_config)
