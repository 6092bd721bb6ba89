"""`llmd logs`: print the end of a log file, then optionally follow it like `tail -f`.

Reads bytes from an offset so that a line being written is printed once it is complete,
and a log truncated or replaced by a restarted daemon is read again from its start.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

FOLLOW_POLL_S = 0.25


def last_lines(path: Path, num_lines: int, out: TextIO) -> int:
    """Write the last `num_lines` lines of `path` to `out`; returns the end offset."""
    with open(path, "rb") as file:
        tail = deque(file, maxlen=num_lines) if num_lines else deque()
        offset = file.tell()
    for line in tail:
        out.write(line.decode(errors="replace"))
    out.flush()
    return offset


def follow_log(
    path: Path, offset: int, out: TextIO, should_stop: Callable[[], bool] = lambda: False
) -> None:
    """Print complete lines appended after `offset` until interrupted (Ctrl-C)."""
    pending = b""
    inode = _inode(path)
    try:
        while not should_stop():
            current = _inode(path)
            size = os.path.getsize(path) if current is not None else 0
            if current != inode or size < offset:  # replaced or truncated: start over
                inode, offset, pending = current, 0, b""
            if current is not None and size > offset:
                with open(path, "rb") as file:
                    file.seek(offset)
                    chunk = file.read()
                offset += len(chunk)
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for line in complete:
                    out.write(line.decode(errors="replace") + "\n")
                out.flush()
            time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        return


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None
