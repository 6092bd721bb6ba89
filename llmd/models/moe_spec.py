"""What a mixture-of-experts checkpoint's config says about its experts, read once.

Each MoE architecture names these fields differently (`num_experts` or
`num_local_experts`, `moe_intermediate_size` or `intermediate_size`), so the model, the
loader's shape facts and the metrics all read this one frozen value instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MoeSpec:
    """The routed experts of a model: how many, how wide, how tokens pick them."""

    num_experts: int
    """Routed experts per MoE layer."""
    num_experts_per_token: int
    """top-k: experts each token is routed to."""
    intermediate_size: int
    """Width of one routed expert's gated MLP."""
    renormalize: bool
    """Whether the chosen k probabilities are divided by their sum."""
    sparse_layer_indices: tuple[int, ...]
    """Decoder layers whose MLP is the MoE block; the others keep a dense MLP."""
    shared_intermediate_size: int = 0
    """Width of the always-on shared expert (Qwen2-MoE), 0 without one."""

    @property
    def num_moe_layers(self) -> int:
        """Decoder layers with routed experts."""
        return len(self.sparse_layer_indices)

    def num_params_per_expert(self, hidden_size: int) -> int:
        """Parameters of one routed expert: gate, up and down projections."""
        return 3 * hidden_size * self.intermediate_size


def qwen_sparse_layers(hf_config: object) -> tuple[int, ...]:
    """Qwen MoE's rule: layer i is sparse unless listed in `mlp_only_layers`, if it is a
    multiple of `decoder_sparse_step` (counting from 1) and the model has experts."""
    num_experts = getattr(hf_config, "num_experts", 0) or 0
    step = getattr(hf_config, "decoder_sparse_step", 1) or 1
    mlp_only = set(getattr(hf_config, "mlp_only_layers", None) or [])
    num_layers: int = hf_config.num_hidden_layers  # type: ignore[attr-defined]
    return tuple(
        i
        for i in range(num_layers)
        if i not in mlp_only and num_experts > 0 and (i + 1) % step == 0
    )


def qwen_moe_spec(hf_config: Any, shared_intermediate_size: int = 0) -> MoeSpec:
    """Qwen MoE's experts (`num_experts`, `num_experts_per_tok`, `moe_intermediate_size`,
    `norm_topk_prob`) and sparse layers, with a shared expert of this width (0: none)."""
    return MoeSpec(
        num_experts=hf_config.num_experts,
        num_experts_per_token=hf_config.num_experts_per_tok,
        intermediate_size=hf_config.moe_intermediate_size,
        renormalize=bool(getattr(hf_config, "norm_topk_prob", False)),
        sparse_layer_indices=qwen_sparse_layers(hf_config),
        shared_intermediate_size=shared_intermediate_size,
    )
