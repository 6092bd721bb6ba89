"""OS-level names for the daemon's threads, so `top -H`, `ps -L` and /proc show which is which.

Python (before 3.14) names threads only inside the interpreter; the kernel sees every
thread as the process. Threads a named thread starts (torch's OpenMP workers, the
tokenizer's pool) inherit its name, so a thread's CPU time can be attributed to the part
of the daemon it serves (`scripts/bench_daemon_threads.py` does so).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

PR_SET_NAME = 15
MAX_NAME_BYTES = 15
"""The kernel keeps 16 bytes of a thread's name, the terminating NUL included."""
MAIN_THREAD_NAME = "llmd-io"
"""`llmd serve`'s main thread, which runs the I/O loop (and names the process in `ps`)."""


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def name_os_thread(name: str) -> bool:
    """Give the calling thread `name` (cut to 15 bytes) in the OS; False where unsupported."""
    libc = _libc()
    if libc is None:
        return False
    raw = name.encode("ascii", "replace")[:MAX_NAME_BYTES]
    return libc.prctl(PR_SET_NAME, ctypes.c_char_p(raw), 0, 0, 0) == 0
