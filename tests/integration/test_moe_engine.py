"""MoE models in the engine: layer layout, packed experts, and routing figures that hold.

The greedy tokens are checked against HF in test_greedy_equivalence.py; here the figures
the metrics are built on are checked against counts made independently: a lone decode
token touches exactly top-k experts in every MoE layer, and every computed token adds
top-k to its layers' routing load.
"""

from __future__ import annotations

import pytest
import torch
import transformers

from llmd import LLM, SamplingParams
from llmd.config import EngineConfig
from llmd.layers.packed_experts import PackedExpertGemm
from llmd.layers.packed_linear import can_pack
from llmd.llm_engine import LLMEngine
from llmd.models.llama import GatedMLP
from llmd.models.loader import load_hf_config, model_shape
from llmd.models.sparse_moe_block import SparseMoeBlock
from tests.tiny_model import make_tiny_model

TOP_K, NUM_EXPERTS = 2, 8
SPARSE_LAYERS = {"qwen3_moe": [0, 2], "mixtral": [0, 1], "qwen2_moe": [1]}
"""mlp_only_layers=[1] (qwen3_moe), every layer (mixtral), decoder_sparse_step=2 (qwen2_moe)."""


@pytest.fixture(scope="module", params=list(SPARSE_LAYERS))
def moe_model(request, tmp_path_factory):
    """(architecture, a tiny MoE model directory)."""
    return request.param, make_tiny_model(tmp_path_factory.mktemp(request.param), request.param)


def test_sparse_layers_and_shape_facts(moe_model):
    arch, path = moe_model
    llm = LLM(str(path), device="cpu", dtype="float32", num_blocks=64, block_size=4)
    layers = llm.engine.runner.model.model.layers
    sparse = [i for i, layer in enumerate(layers) if isinstance(layer.mlp, SparseMoeBlock)]
    assert sparse == SPARSE_LAYERS[arch]
    assert all(isinstance(layers[i].mlp, GatedMLP) for i in range(len(layers)) if i not in sparse)
    has_shared = [layers[i].mlp.shared_expert is not None for i in sparse]
    assert has_shared == [arch == "qwen2_moe"] * len(sparse)
    experts = [layers[i].mlp.experts for i in sparse]
    if llm.engine.runner.kernel_config.use_cpu_ops:  # the C++ grouped linear, weights stacked
        assert all(e.uses_cpu_grouped_linear and e.expert_gemm is None for e in experts)
    elif can_pack(torch.float32):
        assert all(isinstance(e.expert_gemm, PackedExpertGemm) for e in experts)

    shape = model_shape(load_hf_config(path))
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(path)
    assert shape.num_params == hf_model.num_parameters()  # an independent count
    expert_width = 32  # moe_intermediate_size / Mixtral's intermediate_size in the factory
    assert shape.num_params_per_expert == 3 * shape.hidden_size * expert_width
    assert (shape.num_experts, shape.num_experts_per_token) == (NUM_EXPERTS, TOP_K)
    assert shape.num_moe_layers == len(SPARSE_LAYERS[arch])
    facts = llm.engine.facts()
    assert (facts.num_experts, facts.num_moe_layers) == (NUM_EXPERTS, shape.num_moe_layers)


def test_touched_experts_and_routing_load_match_hand_counts(moe_model):
    arch, path = moe_model
    config = EngineConfig(
        model=str(path), device="cpu", dtype="float32", num_blocks=64, block_size=4,
        async_scheduling=False,
    )  # fmt: skip
    engine = LLMEngine(config)
    num_moe_layers = len(SPARSE_LAYERS[arch])
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    engine.add_request(list(range(3, 14)), params)
    num_computed_tokens = 0
    while engine.has_unfinished_requests():
        stats = engine.step().stats
        if stats is None:
            continue
        num_computed_tokens += stats.num_tokens
        if stats.num_prefill_tokens == 0:
            # One token, k distinct experts in each MoE layer.
            assert stats.num_experts_touched == num_moe_layers * TOP_K
        else:
            assert TOP_K * num_moe_layers <= stats.num_experts_touched
            assert stats.num_experts_touched <= NUM_EXPERTS * num_moe_layers
    assert num_computed_tokens == 11 + 5  # the prompt, then every output but the last
    load = engine.snapshot().moe
    assert load is not None and len(load.expert_tokens) == num_moe_layers
    assert [sum(row) for row in load.expert_tokens] == [TOP_K * num_computed_tokens] * (
        num_moe_layers
    )
    assert sum(load.tokens_per_expert) == TOP_K * num_computed_tokens * num_moe_layers
    assert load.max_imbalance is not None and 1.0 <= load.max_imbalance <= NUM_EXPERTS


def test_a_dense_model_reports_no_experts(tiny_model_dir):
    engine = LLMEngine(EngineConfig(model=str(tiny_model_dir), device="cpu", num_blocks=32))
    engine.add_request([5, 6, 7], SamplingParams(max_tokens=2, ignore_eos=True))
    touched = []
    while engine.has_unfinished_requests():
        stats = engine.step().stats
        if stats is not None:
            touched.append(stats.num_experts_touched)
    assert touched and set(touched) == {0}
    assert engine.snapshot().moe is None and engine.facts().num_experts == 0
