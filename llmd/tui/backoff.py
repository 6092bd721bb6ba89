"""Exponential reconnect delays, capped, reset after a success.

A monitor left open while the daemon restarts should reconnect quickly at first and then
stop hammering an address nobody listens on.
"""

from __future__ import annotations


class Backoff:
    """Delays of `initial_s`, doubling up to `max_s`; `reset()` after a successful connect."""

    def __init__(self, initial_s: float = 0.25, max_s: float = 5.0, factor: float = 2.0) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.factor = factor
        self.num_failures = 0

    def next_delay(self) -> float:
        """Record one more failure and return how long to wait before retrying."""
        delay = min(self.max_s, self.initial_s * self.factor**self.num_failures)
        self.num_failures += 1
        return delay

    def reset(self) -> None:
        """Connected again: the next failure starts from `initial_s`."""
        self.num_failures = 0
