"""Top-k expert routing: which experts each token goes to and with what weight.

The MoE architectures differ only in how router logits become weights (softmax over all
experts then top-k, optionally renormalised over the chosen k), so the rule is one
function with a flag and every architecture's block calls it.
"""

from __future__ import annotations

import torch


def route_top_k(
    router_logits: torch.Tensor,  # [num_tokens, num_experts]
    top_k: int,
    renormalize: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights [num_tokens, top_k] float32, expert ids [num_tokens, top_k] int64).

    Softmax in float32 over all experts, then the k largest probabilities; with
    `renormalize` they are divided by their sum (Mixtral always, Qwen MoE where
    `norm_topk_prob` is set), which equals a softmax over the chosen logits only.
    """
    probs = torch.softmax(router_logits, dim=-1, dtype=torch.float32)
    weights, expert_ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, expert_ids
