"""Keeps the C allocator from handing a CPU forward pass's buffers back to the kernel.

glibc's malloc serves large blocks (128 KiB at first) with a fresh mmap and unmaps them on
free, and trims the heap's free top: so each step's activations (a [512, 3072] chunk is
3 MiB) are faulted in again page by page, every step. On the 2-core Zen 5 VM one bf16
batch of 32 x 500-token prompts took 1.3 million minor faults and 3.3 s of system time;
with the settings here it takes under 200 (docs/ARCHITECTURE.md, "The CPU allocator").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from dataclasses import dataclass

logger = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
"""mallopt parameter numbers from glibc's malloc.h."""

MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
"""Blocks below this come from the heap: glibc's largest allowed threshold on 64-bit,
above every per-step buffer of the models llmd serves on a CPU except the logits of
very large batches."""
TRIM_THRESHOLD_BYTES = 2**31 - 1
"""Free heap memory kept rather than returned (the largest value mallopt takes, 2 GiB):
a step's buffers are reused by the next step instead of faulted in again, and resident
memory stays at the peak of one step's activations."""


@dataclass(frozen=True)
class AllocatorSettings:
    """What `retain_freed_memory` did, for the start-up log and the tests."""

    is_applied: bool
    reason: str
    """Why not, when not applied (not glibc, mallopt refused)."""


@functools.cache
def retain_freed_memory() -> AllocatorSettings:
    """Raise glibc's mmap and trim thresholds once per process; a no-op elsewhere.

    Called before a CPU engine allocates anything of its own; the settings are global to
    the process and idempotent, so every engine in it shares them.
    """
    libc = _glibc()
    if libc is None:
        return AllocatorSettings(False, "the C library is not glibc")
    for parameter, value in (
        (_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
        (_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
    ):
        if libc.mallopt(parameter, value) != 1:
            logger.info("host allocator unchanged: glibc refused mallopt(%d, %d)", parameter, value)
            return AllocatorSettings(False, f"mallopt({parameter}) refused")
    logger.info(
        "host allocator: blocks under %d MiB stay in the heap; freed memory is kept",
        MMAP_THRESHOLD_BYTES >> 20,
    )
    return AllocatorSettings(True, "")


def _glibc() -> ctypes.CDLL | None:
    """The process's C library, if it is glibc (it has gnu_get_libc_version and mallopt)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc
