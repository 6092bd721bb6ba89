"""When a draining daemon stops: the drain's deadline, its forced abort, and who asked.

A drain lets in-flight requests finish until its deadline (the earliest of all drain
requests), then aborts what is left and, if the aborts' replies do not all come back
within a grace period, fails the rest and stops. Kept apart from the socket so that the
decision is plain state and time: the I/O thread asks `next_step` on every wake-up.
"""

from __future__ import annotations

import enum
import logging

from llmd.daemon.outbox import Drain

logger = logging.getLogger("llmd.daemon.server")

FORCED_STOP_GRACE_S = 5.0
"""After aborting everything, how long to wait for the aborts' replies before exiting."""


class DrainStep(enum.Enum):
    """What the I/O thread does now about a drain."""

    NONE = "none"
    """Not draining, or requests still have time to finish."""
    STOP = "stop"
    """Nothing is in flight any more: stop serving."""
    ABORT_ALL = "abort_all"
    """The deadline passed: abort every request in flight (once)."""
    FAIL_ALL = "fail_all"
    """The aborts' grace period passed too: fail what is left with shutting_down and stop."""


class DrainSchedule:
    """The state of a drain: its deadline, when it aborted, and the shutdown requesters."""

    def __init__(self, default_timeout_s: float) -> None:
        self.default_timeout_s = default_timeout_s
        self.deadline: float | None = None
        """Monotonic time after which what is in flight is aborted (None: not draining)."""
        self.aborted_at: float | None = None
        self.requesters: list[tuple[bytes, str]] = []
        """(peer, client id) of each shutdown request, acknowledged again at the stop."""
        self.num_in_flight_at_start = 0
        self.num_aborted = 0

    @property
    def is_draining(self) -> bool:
        """True once any drain was asked for."""
        return self.deadline is not None

    def request(self, drain: Drain, num_in_flight: int, now: float) -> None:
        """Add a drain request; the earliest deadline of all of them holds."""
        if drain.requester is not None:
            self.requesters.append(drain.requester)
        timeout = self.default_timeout_s if drain.timeout_s is None else drain.timeout_s
        deadline = now + (0.0 if drain.now else timeout)
        if self.deadline is None:
            logger.info("draining %d request(s) (limit %.1fs)", num_in_flight, timeout)
            self.num_in_flight_at_start = num_in_flight
        if self.deadline is None or deadline < self.deadline:
            self.deadline = deadline

    def next_step(self, num_in_flight: int, now: float) -> DrainStep:
        """What to do now, with `num_in_flight` requests still routed."""
        if self.deadline is None:
            return DrainStep.NONE
        if not num_in_flight:
            return DrainStep.STOP
        if self.aborted_at is None and now >= self.deadline:
            logger.info("drain limit reached; aborting %d request(s)", num_in_flight)
            self.aborted_at = now
            self.num_aborted = num_in_flight
            return DrainStep.ABORT_ALL
        if self.aborted_at is not None and now > self.aborted_at + FORCED_STOP_GRACE_S:
            return DrainStep.FAIL_ALL
        return DrainStep.NONE

    def summary(self) -> str:
        """What the drain did, for the requesters' last acknowledgement."""
        num_drained = self.num_in_flight_at_start - self.num_aborted
        return f"drained {num_drained}, aborted {self.num_aborted}"
