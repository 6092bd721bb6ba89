"""The grouped GEMM against expert-by-expert matmuls, over the routings that break it."""

from __future__ import annotations

import pytest
import torch

from llmd.errors import InvalidParameterError
from llmd.kernels.grouped_gemm import expert_tiles, grouped_gemm, grouped_gemm_reference
from tests.kernels.tolerances import elementwise_tolerance

COUNTS = {
    "ragged": [3, 0, 17, 1, 0, 33, 5, 2],  # runs shorter and longer than a tile, empties
    "one_expert_takes_all": [0, 0, 0, 0, 0, 0, 40, 0],
    "all_idle_but_one_row": [0, 1, 0, 0, 0, 0, 0, 0],
}


@pytest.mark.parametrize("case", list(COUNTS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_expert_by_expert_matmuls(device, case, dtype):
    generator = torch.Generator().manual_seed(0)
    counts = torch.tensor(COUNTS[case])
    num_rows, depth, num_cols = int(counts.sum()), 48, 40  # K and N not multiples of tiles
    rows = torch.randn(num_rows, depth, generator=generator).to(dtype)
    weight = torch.randn(len(counts), num_cols, depth, generator=generator).to(dtype)
    out = grouped_gemm(rows.to(device), weight.to(device), counts.to(device))
    want = grouped_gemm_reference(rows, weight, counts)
    tolerance = {"rtol": 1e-5, "atol": 1e-4} if dtype == torch.float32 else {}
    torch.testing.assert_close(out.cpu(), want, **(tolerance or elementwise_tolerance(dtype)))


def test_the_tile_map_covers_each_expert_run_once():
    counts = torch.tensor([3, 0, 17, 1])
    tile_expert, tile_row, ends = expert_tiles(counts, block_m=8, num_rows=21)
    used = tile_expert < 4
    # Expert 0: rows 0-2 (one tile); expert 2: rows 3-19 (three tiles); expert 3: row 20.
    assert list(zip(tile_expert[used].tolist(), tile_row[used].tolist())) == [
        (0, 0), (2, 3), (2, 11), (2, 19), (3, 20),
    ]  # fmt: skip
    assert tile_expert.numel() == 3 + 4 and ends.tolist() == [3, 3, 20, 21]


def test_empty_rows_give_an_empty_output(device):
    out = grouped_gemm(torch.zeros(0, 8, device=device), torch.zeros(2, 4, 8, device=device),
                       torch.zeros(2, dtype=torch.int64, device=device))  # fmt: skip
    assert out.shape == (0, 4)


@pytest.mark.parametrize(
    ("make_bad", "field"),
    [
        (lambda: (torch.randn(3, 8), torch.randn(2, 4, 7), torch.tensor([1, 2])), "weight"),
        (lambda: (torch.randn(3, 8), torch.randn(2, 4, 8), torch.tensor([3])), "counts"),
        (
            lambda: (torch.randn(3, 8), torch.randn(2, 4, 8).double(), torch.tensor([1, 2])),
            "weight",
        ),
        (lambda: (torch.randn(3, 8).int(), torch.randn(2, 4, 8), torch.tensor([1, 2])), "rows"),
    ],
)
def test_rejects_bad_inputs(make_bad, field, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(InvalidParameterError) as error:
        grouped_gemm(*make_bad())
    assert error.value.parameter == field
