"""What `llmd top` watches and keeps: the daemons, a recording to write or one to replay.

The fields' docstrings are the flags' help (llmd.option_spec), so each option of top's
fleet and recording modes is declared once, here, and checked once, with no Textual import.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmd.errors import InvalidParameterError


@dataclass(frozen=True)
class TopSettings:
    """The daemons `llmd top` watches, or the recording it replays instead."""

    addresses: tuple[str, ...] = ()
    """Daemon address, ipc://PATH or tcp://HOST:PORT; repeat it to watch a fleet."""
    addresses_file: str | None = None
    """A file of daemon addresses, one a line (# starts a comment), added to --address."""
    record: str | None = None
    """Write every snapshot received (of each daemon) to this JSON-lines file."""
    replay: str | None = None
    """Show a file written by --record instead of live daemons."""
    speed: float = 1.0
    """Replay speed: 2 plays a recording twice as fast as it was recorded."""

    def __post_init__(self) -> None:
        if not self.speed > 0:
            raise InvalidParameterError(f"must be > 0, got {self.speed}", "speed")
        if self.replay is None:
            if self.speed != 1.0:
                raise InvalidParameterError("applies only with --replay", "speed")
            return
        if self.addresses or self.addresses_file:
            raise InvalidParameterError(
                "a recording names its own daemons: drop --address/--addresses-file", "replay"
            )
        if self.record is not None:
            raise InvalidParameterError("cannot record a replay: drop --record", "replay")

    @property
    def is_replay(self) -> bool:
        """Whether top shows a recording rather than live daemons."""
        return self.replay is not None


def read_addresses(text: str, source: str) -> list[str]:
    """The addresses in a file's `text`, one a line, blank lines and # comments skipped;
    `source` names the file in errors (each address is checked by the caller)."""
    addresses = []
    for line in text.splitlines():
        address = line.split("#", 1)[0].strip()
        if address:
            addresses.append(address)
    if not addresses:
        raise InvalidParameterError(f"{source} holds no address", "addresses_file")
    return addresses
