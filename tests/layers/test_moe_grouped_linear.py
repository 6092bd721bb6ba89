"""llmd's C++ grouped expert linear against torch (one F.linear per expert), in float32 and
bfloat16, at decode and prefill row counts, on shapes that are no multiple of the vectors'
width, with experts that get no row, one that gets them all, and the inputs it refuses."""

from __future__ import annotations

import pytest
import torch

RELATIVE_TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
"""Largest |op - reference| / max |reference|: float32 differs only in summation order;
bfloat16 rounds the output once (half an ulp is 2^-9 of a value)."""
SHAPES = [(8, 20, 33), (6, 64, 64), (5, 17, 100), (4, 768, 1024)]
"""(experts, out_features, in_features): tails of 4-row tiles, 16-row tasks and 16/32-wide
vectors, exact multiples, and the benchmark's gate/up shape."""


def offsets_of(counts: list[int]) -> torch.Tensor:
    """[experts + 1] slot offsets of per-expert row counts."""
    return torch.tensor([0, *torch.tensor(counts).cumsum(0).tolist()], dtype=torch.int64)


def reference(rows: torch.Tensor, weight: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """Each expert's run of rows times its weight, in float32."""
    out = torch.zeros(rows.shape[0], weight.shape[1])
    first = 0
    for expert, count in enumerate(counts):
        out[first : first + count] = rows[first : first + count].float() @ weight[expert].float().T
        first += count
    return out


def counts_for(case: str, num_experts: int, num_slots: int, generator) -> list[int]:
    """Row counts per expert summing to num_slots: random with idle experts, or all on one."""
    if case == "one_takes_all":
        counts = [0] * num_experts
        counts[num_experts // 2] = num_slots
        return counts
    ids = torch.randint(0, num_experts, (num_slots,), generator=generator)
    ids[ids == 1] = 0  # expert 1 gets nothing
    return torch.bincount(ids, minlength=num_experts).tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("num_slots", [1, 7, 64, 300])
@pytest.mark.parametrize("case", ["random", "one_takes_all"])
def test_grouped_linear_matches_per_expert_linears(cpu_ops, dtype, shape, num_slots, case):
    num_experts, out_features, in_features = shape
    generator = torch.Generator().manual_seed(num_slots * 31 + out_features)
    weight = torch.randn(num_experts, out_features, in_features, generator=generator).to(dtype)
    rows = torch.randn(num_slots, in_features, generator=generator).to(dtype)
    counts = counts_for(case, num_experts, num_slots, generator)
    out = torch.full((num_slots, out_features), float("nan"), dtype=dtype)
    cpu_ops.moe_grouped_linear(out, rows, weight, offsets_of(counts))
    want = reference(rows, weight, counts)
    error = (out.float() - want).abs().max().item()
    assert error <= RELATIVE_TOLERANCE[dtype] * want.abs().max().item(), (error, counts)


def test_no_slots_touch_nothing(cpu_ops):
    out = torch.empty(0, 8)
    cpu_ops.moe_grouped_linear(
        out, torch.empty(0, 16), torch.randn(3, 8, 16), offsets_of([0, 0, 0])
    )
    assert out.shape == (0, 8)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("offsets_short", "experts \\+ 1"),
        ("offsets_decrease", "must not decrease"),
        ("offsets_total", "from 0 to the number of slots"),
        ("weight_dtype", "of rows' dtype"),
        ("in_features", "in_features 16"),
        ("out_shape", "out must be"),
        ("rows_dtype", "float32 or bfloat16"),
    ],
)
def test_bad_inputs_are_refused_with_what_is_wrong(cpu_ops, change, message):
    rows, weight = torch.randn(4, 16), torch.randn(3, 8, 16)
    offsets, out = offsets_of([1, 2, 1]), torch.empty(4, 8)
    if change == "offsets_short":
        offsets = offsets[:-1]
    if change == "offsets_decrease":
        offsets = torch.tensor([0, 3, 2, 4])
    if change == "offsets_total":
        offsets = offsets_of([1, 1, 1])
    if change == "weight_dtype":
        weight = weight.to(torch.bfloat16)
    if change == "in_features":
        weight = torch.randn(3, 8, 12)
    if change == "out_shape":
        out = torch.empty(4, 9)
    if change == "rows_dtype":
        rows, weight, out = rows.half(), weight.half(), out.half()
    with pytest.raises(RuntimeError, match=message):
        cpu_ops.moe_grouped_linear(out, rows, weight, offsets)
