"""CPU linear layers whose weights are repacked once into oneDNN's blocked GEMM layout.

torch's default CPU GEMM repacks the whole weight matrix on every call, which at decode's
small batches costs more than the multiply (2-2.5x slower at 4-64 rows on the 2-core
EPYC, docs/ARCHITECTURE.md); packing at load time pays that once.

oneDNN (and ideep above it) cache one primitive per weight shape and row count, each
holding up to a few MB, in LRU caches of 1024 entries: a server whose batch sizes vary
would grow for hours. So row counts are padded up to a small fixed set of buckets, longer
inputs run in chunks of 512 and 256 rows, and every bucket is built once at load
(`warm_up_packed_linears`): memory is flat from the first request.
"""

from __future__ import annotations

import logging
import time

import torch
import torch.nn.functional as F
from torch import nn

logger = logging.getLogger(__name__)

PACKABLE_DTYPES = (torch.float32, torch.bfloat16)
"""Weight dtypes oneDNN's packed linear handles (bf16 only on CPUs that pack it natively)."""

_SELF_CHECK_TOLERANCE = 1e-3
"""Largest relative error against F.linear the packed GEMM may show on a random input."""

ROW_CHUNK = 256
"""Inputs with more rows run as chunks of `LARGE_ROW_CHUNK` rows while that many are left,
then of this many (the last one padded to its bucket)."""
LARGE_ROW_CHUNK = 512
"""Long prefill steps (a 2,048-token budget is four of these) lose ~3% to chunking at 512
rows against ~6-9% at 256; one more bucket, of 512 x columns floats per weight shape."""
_ROW_STEPS = ((8, 1), (64, 8), (ROW_CHUNK, 32))
"""(up to this many rows, pad to a multiple of this): exact at decode's smallest batches,
then at most 7 or 31 padding rows; 21 buckets up to ROW_CHUNK, plus LARGE_ROW_CHUNK."""
MAX_SHARD_COLUMNS = 4096
"""Wider weights (a vocabulary head) are split into shards of this many output columns:
a primitive keeps a buffer of rows x columns, and equal shards share one primitive."""


def padded_rows(num_rows: int) -> int:
    """The bucket `num_rows` (1..ROW_CHUNK) is padded up to."""
    for limit, step in _ROW_STEPS:
        if num_rows <= limit:
            return -(-num_rows // step) * step
    raise ValueError(f"{num_rows} rows is more than a chunk ({ROW_CHUNK})")


def row_buckets() -> list[int]:
    """Every row count a packed GEMM runs at, ascending."""
    buckets = {padded_rows(num_rows) for num_rows in range(1, ROW_CHUNK + 1)}
    return sorted(buckets | {LARGE_ROW_CHUNK})


_PADDING_ROWS = [0] + [padded_rows(num_rows) - num_rows for num_rows in range(1, ROW_CHUNK + 1)]
_PADDING_ROWS += [-1] * (LARGE_ROW_CHUNK - ROW_CHUNK - 1) + [0]  # only 512 itself runs whole
"""Zero rows added to an input of each row count (index), precomputed for the hot path."""


class PackedLinear(nn.Module):
    """y = x W^T + b with W held as opaque oneDNN-packed shards of output columns.

    Built from an `nn.Linear` by `pack_linear_layers`; the plain weight is dropped (unless
    another module shares it, e.g. tied embeddings), so packing costs no extra memory.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.dtype = weight.dtype
        self.shards: list[tuple[int, int, torch.Tensor, torch.Tensor | None]] = []
        """(first column, end column, packed weight, bias) per shard, for the hot path."""
        for start in range(0, self.out_features, MAX_SHARD_COLUMNS):
            end = min(start + MAX_SHARD_COLUMNS, self.out_features)
            packed = torch.ops.mkldnn._reorder_linear_weight(weight[start:end].contiguous())
            shard_bias = None if bias is None else bias[start:end].contiguous()
            self.register_buffer(f"packed_weight_{len(self.shards)}", packed, persistent=False)
            self.register_buffer(f"bias_{len(self.shards)}", shard_bias, persistent=False)
            self.shards.append((start, end, packed, shard_bias))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., in_features] -> [..., out_features]."""
        rows = hidden.reshape(-1, self.in_features)  # [M, K]
        num_rows = rows.shape[0]
        if num_rows <= ROW_CHUNK and len(self.shards) == 1:
            _, _, packed, bias = self.shards[0]
            out = _bucketed_gemm(rows, packed, bias)
        else:
            out = rows.new_empty(num_rows, self.out_features)  # [M, N]
            first = 0
            while first < num_rows:
                size = LARGE_ROW_CHUNK if num_rows - first >= LARGE_ROW_CHUNK else ROW_CHUNK
                chunk = rows[first : first + size]  # [512 or <=256, K]
                for start, end, packed, bias in self.shards:
                    out[first : first + size, start:end] = _bucketed_gemm(chunk, packed, bias)
                first += size
        return out.reshape(*hidden.shape[:-1], self.out_features)

    def shard_shapes(self) -> set[tuple[int, int, bool]]:
        """(in, out, has bias) of each distinct shard: what oneDNN builds a primitive for."""
        return {
            (self.in_features, end - start, bias is not None) for start, end, _, bias in self.shards
        }

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"packed=oneDNN, shards={len(self.shards)}"
        )


def can_pack(dtype: torch.dtype) -> bool:
    """Whether this torch build and CPU can pack `dtype` weights for oneDNN's GEMM."""
    if dtype not in PACKABLE_DTYPES or not torch.backends.mkldnn.is_available():
        return False
    if not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return False
    try:
        _self_check(dtype)
    except RuntimeError as error:  # e.g. bf16 packing needs AVX512 / AVX-NE-CONVERT
        logger.info("oneDNN weight packing unavailable for %s: %s", dtype, error)
        return False
    return True


def pack_linear_layers(model: nn.Module) -> int:
    """Replace every CPU `nn.Linear` of `model` with a `PackedLinear`; return how many.

    Leaves the model unchanged (returning 0) when packing is unavailable for its dtype.
    """
    linears = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if isinstance(child, nn.Linear) and child.weight.device.type == "cpu"
    ]
    if not linears or not can_pack(linears[0][2].weight.dtype):
        return 0
    with torch.no_grad():
        for parent, name, linear in linears:
            bias = None if linear.bias is None else linear.bias.detach()
            setattr(parent, name, PackedLinear(linear.weight.detach(), bias))
    return len(linears)


def warm_up_packed_linears(model: nn.Module) -> int:
    """Run one GEMM per row bucket for each distinct packed shape; return how many shapes.

    oneDNN builds its primitives now, at load, so memory does not grow while serving.
    """
    by_shape: dict[tuple[int, int, bool], torch.dtype] = {}
    for module in model.modules():
        if isinstance(module, PackedLinear):
            by_shape.update(dict.fromkeys(module.shard_shapes(), module.dtype))
    if not by_shape:
        return 0
    started = time.perf_counter()
    with torch.no_grad():
        for (in_features, out_features, has_bias), dtype in by_shape.items():
            weight = torch.zeros(out_features, in_features, dtype=dtype)
            bias = torch.zeros(out_features, dtype=dtype) if has_bias else None
            probe = PackedLinear(weight, bias)
            for bucket in row_buckets():
                probe(torch.zeros(bucket, in_features, dtype=dtype))
    logger.info(
        "oneDNN GEMMs built for %d weight shapes x %d row buckets in %.1fs",
        len(by_shape), len(row_buckets()), time.perf_counter() - started,
    )  # fmt: skip
    return len(by_shape)


def _self_check(dtype: torch.dtype) -> None:
    """Raise unless a packed GEMM matches F.linear on a random problem (odd sizes on purpose)."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(37, 129, generator=generator).to(dtype)
    hidden = torch.randn(5, 129, generator=generator).to(dtype)
    expected = torch.nn.functional.linear(hidden.float(), weight.float())
    packed = torch.ops.mkldnn._reorder_linear_weight(weight)
    got = _packed_gemm(hidden, packed, None).float()
    error = (got - expected).abs().max().item() / expected.abs().max().item()
    tolerance = _SELF_CHECK_TOLERANCE if dtype == torch.float32 else 1e-2
    if not error <= tolerance:
        raise RuntimeError(f"packed GEMM differs from F.linear by {error:.2e} (relative)")


def _bucketed_gemm(
    rows: torch.Tensor, packed_weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """[m <= ROW_CHUNK or LARGE_ROW_CHUNK, K] -> [m, N] through the GEMM of m's bucket."""
    num_padding = _PADDING_ROWS[rows.shape[0]]
    if num_padding == 0:
        return _packed_gemm(rows, packed_weight, bias)
    padded = F.pad(rows, (0, 0, 0, num_padding))  # [bucket, K]
    return _packed_gemm(padded, packed_weight, bias)[: rows.shape[0]]


def _packed_gemm(
    hidden: torch.Tensor, packed_weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """oneDNN's linear on a packed weight: [..., K] x [N, K] packed -> [..., N]."""
    return torch.ops.mkldnn._linear_pointwise(hidden, packed_weight, bias, "none", [], "")
