"""The CPU engine keeps freed activation memory in the heap instead of unmapping it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from llmd.runner.host_allocator import AllocatorSettings, retain_freed_memory

# Runs in a fresh interpreter: allocator settings are process-wide and cannot be undone.
_PROBE = textwrap.dedent(
    """
    import ctypes, sys

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    if sys.argv[1] == "retain":
        from llmd.runner.host_allocator import retain_freed_memory
        assert retain_freed_memory().is_applied
    size = 8 << 20  # an 8 MiB activation buffer
    before = libc.mallinfo2()
    block = libc.malloc(size)
    during = libc.mallinfo2()
    libc.free(block)
    after = libc.mallinfo2()
    print(during.hblkhd - before.hblkhd, after.fordblks - before.fordblks)
    """
)


def _probe(mode: str) -> tuple[int, int]:
    """(bytes mmapped for an 8 MiB block, free heap bytes kept after freeing it)."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True
    )
    mapped, kept = done.stdout.split()
    return int(mapped), int(kept)


def _has_mallinfo2() -> bool:
    import ctypes

    try:
        return hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")
    except OSError:
        return False


@pytest.mark.skipif(not _has_mallinfo2(), reason="needs glibc 2.33+ (mallinfo2)")
def test_a_large_block_comes_from_the_heap_and_stays_there() -> None:
    mapped, kept = _probe("default")
    assert mapped >= 8 << 20  # glibc's default: a fresh mapping, faulted in on every use
    assert kept < 1 << 20  # and unmapped on free
    mapped, kept = _probe("retain")
    assert mapped == 0
    assert kept > 7 << 20  # freed into the heap, not trimmed: the next step reuses it


def test_the_settings_are_applied_once_and_reported() -> None:
    first = retain_freed_memory()
    assert isinstance(first, AllocatorSettings)
    assert retain_freed_memory() is first
    assert first.is_applied == (first.reason == "")
