"""Hand-computed roofline figures: where parameters cost FLOPs and bytes."""

from __future__ import annotations

import pytest

from llmd.metrics.roofline import ModelCost

# A model with vocab 1000, hidden 64 and 100_000 body parameters.
TABLE = 1000 * 64


def test_untied_prefill_runs_projection_only_on_sampled_rows():
    cost = ModelCost(num_params=100_000 + 2 * TABLE, vocab_size=1000, hidden_size=64)
    assert cost.num_body_params == 100_000
    # 32 prompt tokens, one sampled row: no FLOPs for the embedding lookup.
    assert cost.step_flops(32, 1) == 2 * 100_000 * 32 + 2 * TABLE


def test_tied_prefill_counts_the_shared_table_once_per_sampled_row():
    cost = ModelCost(num_params=100_000 + TABLE, vocab_size=1000, hidden_size=64, is_tied=True)
    assert cost.step_flops(10, 2) == 2 * 100_000 * 10 + 2 * TABLE * 2


def test_untied_decode_reads_embedding_rows_not_the_table():
    cost = ModelCost(num_params=100_000 + 2 * TABLE, vocab_size=1000, hidden_size=64)
    # 3 sequences in float16, 40 context tokens of 128 KV bytes each.
    expected = (100_000 + TABLE + 3 * 64) * 2 + 40 * 128
    assert cost.decode_step_bytes(2, 3, 40, 128) == expected


def test_tied_decode_reads_the_shared_table_once():
    cost = ModelCost(num_params=100_000 + TABLE, vocab_size=1000, hidden_size=64, is_tied=True)
    assert cost.decode_step_bytes(4, 1, 0, 0) == (100_000 + TABLE + 64) * 4


def test_host_peaks_are_measured_positive_numbers():
    torch = pytest.importorskip("torch")
    assert torch is not None
    from llmd.runner.host_peaks import measure_host_peaks

    peaks = measure_host_peaks("float32", budget_s=0.05)
    assert peaks.source == "measured"
    assert peaks.gb_per_s > 0 and peaks.tflop_per_s > 0


def test_moe_costs_count_active_experts_only():
    """2 MoE layers x 8 experts of 300 params, top-2; 1,000 dense body params; untied
    tables of 1000 x 64. Worked by hand: routed 2 x 8 x 300 = 4,800; a token's active body
    1,000 + 2 x 2 x 300 = 2,200."""
    num_params = 1000 + 4800 + 2 * TABLE
    cost = ModelCost(
        num_params=num_params, vocab_size=1000, hidden_size=64,
        num_experts=8, num_experts_per_token=2, num_moe_layers=2, num_params_per_expert=300,
    )  # fmt: skip
    assert cost.num_routed_params == 4800
    assert cost.num_body_params == 1000
    assert cost.num_active_params_per_token == 2200
    assert cost.step_flops(num_tokens=10, num_sampled_rows=3) == 2 * (2200 * 10 + TABLE * 3)
    # A decode step that touched 5 (layer, expert) pairs reads 5 experts, not 16.
    got = cost.decode_step_bytes(2, num_seqs=3, kv_context_tokens=7, kv_bytes_per_token=10,
                                 num_experts_touched=5)  # fmt: skip
    assert got == (1000 + 5 * 300 + TABLE + 3 * 64) * 2 + 7 * 10
    dense = ModelCost(num_params=1000 + 2 * TABLE, vocab_size=1000, hidden_size=64)
    assert dense.num_active_params_per_token == dense.num_body_params == 1000
