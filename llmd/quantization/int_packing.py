"""Unpacking of integer codes packed several to an int32, as every int4/int8 format stores them.

The formats differ only in the packed axis and the order of codes inside a word (AWQ
interleaves nibbles); one shift-and-mask routine, independent of the host's byte order,
serves them all.
"""

from __future__ import annotations

import torch

AWQ_NIBBLE_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
"""AWQ's GEMM packing: nibble i of a word holds column AWQ_NIBBLE_ORDER[i] of its 8."""


def unpack_int32(packed: torch.Tensor, num_bits: int, order: tuple[int, ...] | None = None):
    """[R, W] int32 -> [R, W * 32 / num_bits] int16 unsigned codes, the lowest bits first.

    `order`, when given, says which code of each word's group each field holds (AWQ).
    """
    per_word = 32 // num_bits
    shifts = torch.arange(0, 32, num_bits, dtype=torch.int32)  # [per_word]
    fields = (packed.to(torch.int32).unsqueeze(-1) >> shifts) & ((1 << num_bits) - 1)
    if order is not None:
        field_of_column = [order.index(column) for column in range(per_word)]
        fields = fields[..., field_of_column]
    return fields.reshape(packed.shape[0], -1).to(torch.int16)  # [R, W * per_word]
