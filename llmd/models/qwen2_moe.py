"""Qwen2-MoE checkpoints: Qwen2's attention (q/k/v bias) with routed and shared experts.

The routing rule and sparse layers are Qwen3-MoE's; each MoE layer adds an always-on
shared expert whose output is scaled by sigmoid(shared_expert_gate(x)).
"""

from __future__ import annotations

from typing import Any

from llmd.models.moe_causal_lm import MoeForCausalLM
from llmd.models.moe_spec import MoeSpec, qwen_moe_spec


class Qwen2MoeForCausalLM(MoeForCausalLM):
    """Qwen2-MoE (e.g. Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B)."""

    @classmethod
    def projection_biases(cls, hf_config: Any) -> tuple[bool, bool]:
        """q/k/v follow `qkv_bias` (on by default), o_proj has none."""
        return bool(getattr(hf_config, "qkv_bias", True)), False

    @classmethod
    def moe_spec(cls, hf_config: Any) -> MoeSpec:
        """Qwen3-MoE's fields plus `shared_expert_intermediate_size`."""
        shared = getattr(hf_config, "shared_expert_intermediate_size", 0) or 0
        return qwen_moe_spec(hf_config, shared)
