"""`GroupedIntWeight`: one linear's integer weight as signed codes, group scales and zero points.

AWQ, GPTQ and compressed-tensors pack the same information three ways; each reader
unpacks into this one form, so the fused-projection concatenation, the kernels' repacking
and the dequantized reference exist once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GroupedIntWeight:
    """w[n, k] = (values[n, k] - zero_points[n, g]) * scales[n, g], g = group_ids[k]."""

    values: torch.Tensor
    """[N, K] int8 signed codes: an unsigned code minus 2^(num_bits - 1)."""
    scales: torch.Tensor
    """[N, G] float32."""
    zero_points: torch.Tensor | None
    """[N, G] int16 in the codes' signed domain; None when symmetric (all zero)."""
    group_size: int
    """Columns per group (K for one scale per row)."""
    num_bits: int
    group_ids: torch.Tensor | None = None
    """[K] int64 group of each column (GPTQ's act-order g_idx); None: column // group_size."""

    @property
    def shape(self) -> tuple[int, int]:
        """(out_features, in_features)."""
        return (self.values.shape[0], self.values.shape[1])

    def column_groups(self) -> torch.Tensor:
        """[K] int64: the group of each column."""
        if self.group_ids is not None:
            return self.group_ids
        return torch.arange(self.values.shape[1]) // self.group_size

    def dequantize(self) -> torch.Tensor:
        """[N, K] float32: the weight the codes stand for (the reference every kernel meets)."""
        groups = self.column_groups()
        codes = self.values.float()
        if self.zero_points is not None:
            codes = codes - self.zero_points.float()[:, groups]
        return codes * self.scales.float()[:, groups]


def concat_rows(shards: list[GroupedIntWeight]) -> GroupedIntWeight | None:
    """The shards stacked along the output dim (a fused q/k/v or gate/up), or None when they
    differ in bits, groups or act-order and cannot share one kernel."""
    first = shards[0]
    for shard in shards[1:]:
        if (shard.num_bits, shard.group_size) != (first.num_bits, first.group_size):
            return None
        if shard.values.shape[1] != first.values.shape[1]:
            return None
        if (shard.group_ids is None) != (first.group_ids is None):
            return None
        if shard.group_ids is not None and not torch.equal(shard.group_ids, first.group_ids):
            return None
    if len(shards) == 1:
        return first
    has_zero_points = any(shard.zero_points is not None for shard in shards)
    zero_points = None
    if has_zero_points:
        zero_points = torch.cat(
            [
                shard.zero_points
                if shard.zero_points is not None
                else torch.zeros_like(shard.scales, dtype=torch.int16)
                for shard in shards
            ]
        )
    return GroupedIntWeight(
        values=torch.cat([shard.values for shard in shards]),
        scales=torch.cat([shard.scales for shard in shards]),
        zero_points=zero_points,
        group_size=first.group_size,
        num_bits=first.num_bits,
        group_ids=first.group_ids,
    )


def sequential_group_ids(group_ids: torch.Tensor, group_size: int) -> bool:
    """Whether act-order `group_ids` are the plain column // group_size (no reordering)."""
    expected = torch.arange(group_ids.numel()) // group_size
    return bool(torch.equal(group_ids.to(torch.int64), expected))


def sorted_by_group(weight: GroupedIntWeight) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The codes with their columns sorted by group, and that column order (None when the
    groups are already sequential); act-order layers reorder the input's columns the same way."""
    if weight.group_ids is None or sequential_group_ids(weight.group_ids, weight.group_size):
        return weight.values, None
    column_order = torch.argsort(weight.group_ids.to(torch.int64), stable=True)
    return weight.values[:, column_order], column_order
