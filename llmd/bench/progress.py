"""A one-line progress bar on stderr: done, failed, and an estimate of what is left.

Benchmarks run for minutes; a silent terminal looks like a hang, but a bar must not
flood logs, so it redraws one line and only on a terminal.
"""

from __future__ import annotations

import time
from typing import TextIO

from llmd.bench.request_record import RequestRecord

BAR_WIDTH = 30


class Progress:
    """Counts finished requests and redraws `[#####.....] 12/40 (1 failed) 3.1s`."""

    def __init__(self, num_total: int, stream: TextIO | None) -> None:
        self.num_total = num_total
        self.num_done = 0
        self.num_failed = 0
        self.stream = stream if stream is not None and stream.isatty() else None
        self.started = time.monotonic()

    def update(self, record: RequestRecord) -> None:
        """Count one finished request and redraw."""
        self.num_done += 1
        self.num_failed += 0 if record.is_ok else 1
        if self.stream is not None:
            self.stream.write("\r" + self.line())
            self.stream.flush()

    def line(self) -> str:
        """The bar as text."""
        filled = BAR_WIDTH * self.num_done // max(1, self.num_total)
        failed = f" ({self.num_failed} failed)" if self.num_failed else ""
        elapsed = time.monotonic() - self.started
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        return f"[{bar}] {self.num_done}/{self.num_total}{failed} {elapsed:.1f}s"

    def close(self) -> None:
        """End the bar's line."""
        if self.stream is not None:
            self.stream.write("\n")
            self.stream.flush()
