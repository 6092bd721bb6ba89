"""`llmd top --replay`: a recording read back and fed to the same views, without a daemon.

Each address of the recording gets a client whose subscription yields that daemon's
snapshots at their recorded times (scaled by the speed), decoded by the same
`StatsSnapshot.from_wire` as live ones, so a replay draws the frames the live run drew.
A last line cut by a killed top is skipped; any other bad line is an error naming it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmd.errors import LLMDError
from llmd.protocol import StatsSnapshot
from llmd.tui.top.recording import RECORD_KEYS


class RecordingError(LLMDError):
    """A recording that cannot be replayed; the message names the file and the line."""

    code = "bad_recording"


@dataclass(frozen=True)
class RecordedSnapshot:
    """One line of a recording: when it arrived, from which daemon, and the snapshot."""

    time: float
    address: str
    snapshot: StatsSnapshot
    line_number: int


@dataclass(frozen=True)
class Recording:
    """A whole recording: its snapshots in file order, and whether its last line was cut."""

    path: Path
    snapshots: tuple[RecordedSnapshot, ...]
    is_truncated: bool

    def addresses(self) -> list[str]:
        """The recorded daemons, in order of first appearance."""
        return list(dict.fromkeys(item.address for item in self.snapshots))

    def of(self, address: str) -> list[RecordedSnapshot]:
        """The snapshots of one daemon, in order."""
        return [item for item in self.snapshots if item.address == address]

    def interval_s(self) -> float | None:
        """The median time between one daemon's successive snapshots (the refresh rate it
        was recorded at), None with fewer than two of any daemon."""
        gaps = sorted(
            later.time - earlier.time
            for address in self.addresses()
            for earlier, later in itertools.pairwise(self.of(address))
        )
        return gaps[len(gaps) // 2] if gaps else None


def read_recording(path: Path) -> Recording:
    """Decode every line of `path`; RecordingError names the first bad one."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RecordingError(f"cannot read the recording {path}: {error}", "replay") from None
    *lines, tail = text.split("\n")
    is_tail_cut = tail != ""  # every whole line ends with a newline: this one was cut
    snapshots: list[RecordedSnapshot] = []
    is_truncated = False
    for line_number, line in enumerate([*lines, tail] if is_tail_cut else lines, start=1):
        try:
            snapshots.append(_read_line(line, line_number))
        except RecordingError:
            if is_tail_cut and line_number == len(lines) + 1:
                is_truncated = True  # top was killed while writing it
                break
            problem = _line_problem(line)
            raise RecordingError(f"{path}, line {line_number}: {problem}", "replay") from None
    if not snapshots:
        raise RecordingError(f"{path}: the recording holds no snapshot", "replay")
    return Recording(path, tuple(snapshots), is_truncated)


def _read_line(line: str, line_number: int) -> RecordedSnapshot:
    try:
        data = json.loads(line)
        time_s, address, wire = (data[key] for key in RECORD_KEYS)
        if not isinstance(address, str) or isinstance(time_s, bool):
            raise TypeError("address must be a string")
        return RecordedSnapshot(float(time_s), address, StatsSnapshot.from_wire(wire), line_number)
    except (ValueError, KeyError, TypeError, LLMDError) as error:
        raise RecordingError(str(error)) from error


def _line_problem(line: str) -> str:
    """Why one line is not a recorded snapshot, in words."""
    try:
        data = json.loads(line)
    except ValueError as error:
        return f"not a JSON line ({error})"
    if not isinstance(data, dict):
        return "not a JSON object"
    missing = [key for key in RECORD_KEYS if key not in data]
    if missing:
        return f"missing {', '.join(missing)} (a line holds {', '.join(RECORD_KEYS)})"
    try:
        _read_line(line, 0)
    except RecordingError as error:
        cause = error.__cause__
        field = getattr(cause, "parameter", None)
        return f"bad snapshot{f' at {field}' if field else ''}: {cause}"
    return "unreadable"


class ReplayClock:
    """Shared by every daemon's replay client, so their snapshots keep their recorded order
    and spacing: a snapshot recorded at `t` is due `(t - first) / speed` after the start."""

    def __init__(
        self,
        first_time: float,
        speed: float = 1.0,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not speed > 0:
            raise RecordingError(f"the replay speed must be > 0, got {speed}", "speed")
        self.first_time = first_time
        self.speed = speed
        self._sleep = sleep
        self._clock = clock
        self.started_at: float | None = None

    async def wait_until(self, recorded_time: float) -> None:
        """Sleep until the snapshot recorded at `recorded_time` is due."""
        if self.started_at is None:
            self.started_at = self._clock()
        due = self.started_at + (recorded_time - self.first_time) / self.speed
        await self._sleep(max(0.0, due - self._clock()))


END_AFTER_S = 1.0
"""Recorded seconds after a daemon's last snapshot at which its replay says it ended."""


class ReplayEndedError(LLMDError):
    """The recording has no more snapshots of this daemon (shown as the link's state)."""

    code = "replay_ended"


class ReplayClient:
    """Stands in for a daemon's client: its subscription yields the recorded snapshots.

    The position is kept across subscriptions (the feed subscribes again when the selected
    request changes). At the end it says so once, then holds the last frame.
    """

    def __init__(self, snapshots: list[RecordedSnapshot], clock: ReplayClock) -> None:
        self.snapshots = snapshots
        self.clock = clock
        self.next_index = 0
        self.has_said_end = False

    async def subscribe(self, interval_ms: int = 1000, **_: Any) -> AsyncIterator[StatsSnapshot]:
        """The recorded snapshots from the current position (the interval was the recording's)."""
        while self.next_index < len(self.snapshots):
            item = self.snapshots[self.next_index]
            await self.clock.wait_until(item.time)
            self.next_index += 1
            yield item.snapshot
        if not self.has_said_end and self.snapshots:
            last = self.snapshots[-1]
            await self.clock.wait_until(last.time + END_AFTER_S)
            self.has_said_end = True
            raise ReplayEndedError(
                f"end of the recording (last snapshot at line {last.line_number})"
            )
        await asyncio.Event().wait()  # hold the last frame until top quits

    async def close(self) -> None:
        """Nothing to close (the feed closes its client after each subscription)."""
