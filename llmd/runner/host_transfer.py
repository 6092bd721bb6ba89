"""Host-to-device copies of small per-step arrays, from pinned memory on CUDA.

A copy from pageable memory makes the host wait for the device; a non-blocking copy from
pinned memory is queued behind the work already launched, so preparing a step overlaps the
previous one. Pinning is used only when CUDA is available (a CPU build has no pinned pool).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def to_device(values: Sequence, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """A 1-D tensor of `values` on `device`; on CUDA staged in pinned memory, not blocking.

    The pinned staging block comes from torch's caching host allocator, which keeps it
    until the queued copy has finished, so reusing it can never race the copy.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return torch.tensor(values, dtype=dtype, device=device)
    staged = torch.tensor(values, dtype=dtype, pin_memory=True)
    return staged.to(device, non_blocking=True)


def rows_to_device(
    rows: Sequence[Sequence[int]], dtype: torch.dtype, device: torch.device | str
) -> torch.Tensor:
    """Equal-length integer rows as one [num_rows, row_len] tensor in one transfer."""
    device = torch.device(device)
    if device.type != "cuda":
        return torch.tensor(rows, dtype=dtype, device=device)
    return torch.tensor(rows, dtype=dtype, pin_memory=True).to(device, non_blocking=True)


def array_to_device(array: np.ndarray, device: torch.device | str) -> torch.Tensor:
    """A numpy array as a tensor on `device`: on CUDA copied into pinned memory first.

    On CPU the tensor shares the array's memory, so the array must not be reused.
    """
    device = torch.device(device)
    tensor = torch.from_numpy(array)
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


ALIGN_BYTES = 16
"""Each array `arrays_to_device` packs starts on this boundary: Triton compiles a kernel
variant per pointer alignment (16 bytes or not), so a misaligned `seq_lens` or `positions`
on some steps compiled new variants mid-serving (a stall of about a second each on a GPU)."""


def arrays_to_device(
    arrays: Sequence[np.ndarray], dtype: np.dtype, device: torch.device | str
) -> list[torch.Tensor]:
    """1-D arrays as tensors on `device` in one transfer, each starting 16-byte aligned.

    They are packed into one buffer (each padded to `ALIGN_BYTES`), copied once (see
    `array_to_device`), and returned as views into the device copy, in order.
    """
    step = max(1, ALIGN_BYTES // np.dtype(dtype).itemsize)
    offsets, total = [], 0
    for array in arrays:
        offsets.append(total)
        total += -(-len(array) // step) * step
    packed = np.zeros(total, dtype=dtype)
    for offset, array in zip(offsets, arrays, strict=True):
        packed[offset : offset + len(array)] = array
    tensor = array_to_device(packed, device)
    return [
        tensor[offset : offset + len(array)]
        for offset, array in zip(offsets, arrays, strict=True)
    ]
