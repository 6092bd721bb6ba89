"""The fused MoE layer against its token-by-token reference, over every expert path.

Routings are drawn at random and then forced into the edge cases that a grouped GEMM
gets wrong first: experts that receive no token, one expert that receives every token,
an empty batch; each with the stacked weights (torch), the oneDNN-packed experts and the
C++ ops (the grouped expert linear and SiLU-and-mul). The routing statistics are checked
against counts made here.
"""

from __future__ import annotations

import pytest
import torch

from llmd.layers.fused_moe import FusedMoE, fused_moe_reference
from llmd.layers.kernel_config import KernelConfig, configure_kernels
from llmd.layers.moe_routing import route_top_k
from llmd.layers.packed_experts import PackedExpertGemm, pack_expert_weights
from llmd.layers.packed_linear import can_pack
from llmd.layers.routing_stats import RoutingStats

NUM_EXPERTS, HIDDEN, INTERMEDIATE, TOP_K = 8, 48, 40, 2
FP32_TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
"""fp32 sums in another order than the reference's (per expert, then index_add_)."""


def make_layer(seed: int, stats: RoutingStats | None = None) -> FusedMoE:
    generator = torch.Generator().manual_seed(seed)
    layer = FusedMoE(NUM_EXPERTS, HIDDEN, INTERMEDIATE, "silu", stats, moe_layer_index=1)
    with torch.no_grad():
        for param in (layer.gate_up_proj, layer.down_proj):
            assert param is not None
            param.copy_(torch.randn(param.shape, generator=generator) * 0.2)
    return layer


def routing(case: str, num_tokens: int, generator: torch.Generator):
    """(weights, expert ids) of one routing case, each token's k experts distinct."""
    scores = torch.rand(num_tokens, NUM_EXPERTS, generator=generator)
    if case == "some_experts_idle":
        scores[:, 3:6] = -1.0  # experts 3, 4 and 5 never chosen
    if case == "one_expert_takes_all":
        scores[:, 6] = 2.0  # expert 6 is every token's first choice
    weights, expert_ids = torch.topk(scores, TOP_K, dim=-1)
    return torch.softmax(weights, dim=-1), expert_ids


def reference(layer_weights: tuple[torch.Tensor, torch.Tensor], hidden, weights, expert_ids):
    gate_up_proj, down_proj = layer_weights
    return fused_moe_reference(hidden, weights, expert_ids, gate_up_proj, down_proj)


CASES = ["random", "some_experts_idle", "one_expert_takes_all"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("num_tokens", [1, 5, 37])
@pytest.mark.parametrize("path", ["torch", "packed", "cpu_ops"])
def test_fused_moe_matches_the_reference(case, num_tokens, path):
    if path == "packed" and not can_pack(torch.float32):
        pytest.skip("this torch build cannot pack fp32 weights for oneDNN")
    generator = torch.Generator().manual_seed(num_tokens)
    stats = RoutingStats(num_moe_layers=2, num_experts=NUM_EXPERTS)
    layer = make_layer(0, stats)
    assert layer.gate_up_proj is not None and layer.down_proj is not None
    stacked = (layer.gate_up_proj.detach().clone(), layer.down_proj.detach().clone())
    if path == "packed":
        assert pack_expert_weights(layer) == 1
        assert isinstance(layer.expert_gemm, PackedExpertGemm) and layer.gate_up_proj is None
    if path == "cpu_ops":
        configure_kernels(layer, KernelConfig(use_cpu_ops=True))
        assert layer.act.kernel_config.use_cpu_ops and layer.uses_cpu_grouped_linear
        assert pack_expert_weights(layer) == 0  # the grouped linear keeps the stacked weights
        assert layer.expert_gemm is None and layer.gate_up_proj is not None
    hidden = torch.randn(num_tokens, HIDDEN, generator=generator)
    weights, expert_ids = routing(case, num_tokens, generator)
    with torch.no_grad():
        got = layer(hidden, weights, expert_ids)
    want = reference(stacked, hidden, weights, expert_ids)
    torch.testing.assert_close(got, want, **FP32_TOLERANCE)

    counted = [0] * NUM_EXPERTS
    for expert_id in expert_ids.reshape(-1).tolist():
        counted[expert_id] += 1
    assert stats.expert_load() == [[0] * NUM_EXPERTS, counted]
    assert stats.take_step_touched() == sum(1 for count in counted if count)
    assert stats.take_step_touched() == 0
    if case == "some_experts_idle":
        assert counted[3] == counted[4] == counted[5] == 0
    if case == "one_expert_takes_all":
        assert counted[6] == num_tokens


def test_an_empty_batch_gives_an_empty_output():
    layer = make_layer(1)
    hidden = torch.zeros(0, HIDDEN)
    out = layer(hidden, torch.zeros(0, TOP_K), torch.zeros(0, TOP_K, dtype=torch.int64))
    assert out.shape == (0, HIDDEN)


@pytest.mark.parametrize("path", ["torch", "cpu_ops"])
def test_bfloat16_experts_stay_close_to_the_fp32_reference(path):
    """bf16 rounds each GEMM's output and the weighted rows: within 2^-6 relative of the
    reference computed in fp32 from the same bf16 weights and inputs."""
    layer = make_layer(2).to(torch.bfloat16)
    if path == "cpu_ops":
        configure_kernels(layer, KernelConfig(use_cpu_ops=True))
        assert layer.uses_cpu_grouped_linear
    generator = torch.Generator().manual_seed(3)
    hidden = torch.randn(16, HIDDEN, generator=generator).to(torch.bfloat16)
    weights, expert_ids = routing("random", 16, generator)
    with torch.no_grad():
        got = layer(hidden, weights, expert_ids).float()
    assert layer.gate_up_proj is not None and layer.down_proj is not None
    want = fused_moe_reference(
        hidden.float(), weights, expert_ids, layer.gate_up_proj.float(), layer.down_proj.float()
    )
    scale = want.abs().max().item()
    assert (got - want).abs().max().item() <= 2**-6 * scale


def test_routing_rules():
    """Softmax over all experts then top-k; renormalised, the k weights sum to one and
    equal a softmax over the chosen logits alone (Mixtral's rule)."""
    logits = torch.tensor([[1.0, 3.0, 2.0, -1.0], [0.0, 0.0, 5.0, 4.0]])
    weights, expert_ids = route_top_k(logits, 2, renormalize=False)
    assert expert_ids.tolist() == [[1, 2], [2, 3]]
    probs = torch.softmax(logits, dim=-1)
    torch.testing.assert_close(weights, probs.gather(1, expert_ids))
    weights, _ = route_top_k(logits, 2, renormalize=True)
    chosen = logits.gather(1, expert_ids)
    torch.testing.assert_close(weights, torch.softmax(chosen, dim=-1))
    assert weights.dtype == torch.float32
