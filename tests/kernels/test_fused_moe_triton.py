"""FusedMoE on the Triton grouped GEMMs against the token-by-token reference.

The routings are the layer tests' edge cases (tests/layers/test_fused_moe.py): idle
experts, one expert taking every token; the touched count stays on the device.
"""

from __future__ import annotations

import pytest
import torch

from llmd.layers.fused_moe import FusedMoE, fused_moe_reference
from llmd.layers.kernel_config import KernelConfig, configure_kernels
from llmd.layers.routing_stats import RoutingStats

NUM_EXPERTS, HIDDEN, INTERMEDIATE, TOP_K = 8, 48, 40, 2


@pytest.mark.parametrize("case", ["random", "some_experts_idle", "one_expert_takes_all"])
def test_grouped_experts_match_the_reference(device, case):
    generator = torch.Generator().manual_seed(7)
    stats = RoutingStats(num_moe_layers=1, num_experts=NUM_EXPERTS)
    layer = FusedMoE(NUM_EXPERTS, HIDDEN, INTERMEDIATE, "silu", stats, moe_layer_index=0)
    with torch.no_grad():
        for param in (layer.gate_up_proj, layer.down_proj):
            assert param is not None
            param.copy_(torch.randn(param.shape, generator=generator) * 0.2)
    layer.to(device)
    assert configure_kernels(layer, KernelConfig(use_triton=True)) == 2  # experts, SiLU
    num_tokens = 21
    scores = torch.rand(num_tokens, NUM_EXPERTS, generator=generator)
    if case == "some_experts_idle":
        scores[:, 3:6] = -1.0
    if case == "one_expert_takes_all":
        scores[:, 6] = 2.0
    weights, expert_ids = torch.topk(scores, TOP_K, dim=-1)
    weights = torch.softmax(weights, dim=-1)
    hidden = torch.randn(num_tokens, HIDDEN, generator=generator)
    with torch.no_grad():
        got = layer(hidden.to(device), weights.to(device), expert_ids.to(device))
    assert layer.gate_up_proj is not None and layer.down_proj is not None
    want = fused_moe_reference(
        hidden, weights, expert_ids, layer.gate_up_proj.cpu(), layer.down_proj.cpu()
    )
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
    touched = stats.take_step_touched()
    assert isinstance(touched, torch.Tensor)  # never read on the host by the layer
    assert int(touched) == len(set(expert_ids.reshape(-1).tolist()))
    assert sum(stats.expert_load()[0]) == num_tokens * TOP_K
