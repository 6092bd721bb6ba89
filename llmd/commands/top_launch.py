"""`llmd top`'s start: one daemon, a fleet, or a replay, each with an optional recording.

One address (or none) starts the single-daemon view exactly as before: a wrong address or
a missing daemon fails at once. Several start the fleet view, where a daemon that does
not answer is a down row instead of an error. A replay needs no daemon at all.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from llmd.errors import InvalidParameterError
from llmd.tui.top.top_settings import TopSettings, read_addresses

CHECK_TIMEOUT_S = 3.0
"""How long the single-daemon view waits for the daemon's health reply before giving up."""
SILENCE_FACTOR = 8
"""Missed snapshot intervals (at least 2 s) after which a client gives up on a daemon."""


def watched_addresses(settings: TopSettings) -> list[str]:
    """--address values then the file's, each once and checked, or the default address."""
    from llmd.protocol import default_address, parse_address

    addresses = list(settings.addresses)
    if settings.addresses_file is not None:
        path = Path(settings.addresses_file)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise InvalidParameterError(f"cannot read {path}: {error}", "addresses_file") from None
        addresses += read_addresses(text, str(path))
    for address in addresses:
        try:
            parse_address(address)
        except InvalidParameterError as error:
            named = error.message if address in error.message else f"{address}: {error.message}"
            raise InvalidParameterError(named, "addresses") from None
    return list(dict.fromkeys(addresses)) or [default_address()]


def run_top(settings: TopSettings, interval_s: float) -> None:
    """Start the view `settings` asks for and return when the user quits."""
    if settings.replay is not None:
        replay(Path(settings.replay), settings.speed, interval_s)
        return
    addresses = watched_addresses(settings)
    if len(addresses) == 1:
        check_one(addresses[0])  # before a recording file is made
    with recorder_of(settings.record) as wrap:
        if len(addresses) == 1:
            watch_one(addresses[0], interval_s, wrap)
        else:
            watch_fleet(addresses, interval_s, wrap)


Wrap = Callable[[Any, str], Any]
"""Wraps a daemon's client (and its address) for recording; the identity when not."""


@contextlib.contextmanager
def recorder_of(path: str | None) -> Iterator[Wrap]:
    """A wrapper recording every snapshot to `path` (closed on exit), or the identity."""
    if path is None:
        yield lambda client, _address: client
        return
    from llmd.tui.top.recording import RecordingClient, SnapshotRecorder

    try:
        recorder = SnapshotRecorder(Path(path))
    except OSError as error:
        raise InvalidParameterError(f"cannot write {path}: {error}", "record") from None
    try:
        yield lambda client, address: RecordingClient(client, recorder, address)
    finally:
        recorder.close()
        print(f"recorded {recorder.num_recorded} snapshots to {path}", file=sys.stderr)


def check_one(address: str) -> None:
    """Fail at once when no daemon answers at `address` (the single view's promise)."""
    from llmd.client import Client
    from llmd.commands.daemon_files import raise_if_crashed

    raise_if_crashed(address)
    with Client(address, timeout=CHECK_TIMEOUT_S) as client:
        client.health()  # a wrong address or no daemon fails here, at once


def watch_one(address: str, interval_s: float, wrap: Wrap) -> None:
    """The single-daemon view of a daemon `check_one` found answering."""
    from llmd.client import AsyncClient
    from llmd.tui.top.app import create_top_app

    silence_s = max(2.0, SILENCE_FACTOR * interval_s)

    def client_factory() -> Any:
        return wrap(AsyncClient(address, timeout=silence_s), address)

    create_top_app(client_factory, address, interval_s).run()


def watch_fleet(addresses: list[str], interval_s: float, wrap: Wrap) -> None:
    """The fleet view: no daemon has to answer for it to start."""
    from llmd.client import AsyncClient
    from llmd.tui.top.fleet_app import create_fleet_app

    silence_s = max(2.0, SILENCE_FACTOR * interval_s)
    factories = [
        lambda address=address: wrap(AsyncClient(address, timeout=silence_s), address)
        for address in addresses
    ]
    create_fleet_app(factories, addresses, interval_s).run()


def replay(path: Path, speed: float, interval_s: float) -> None:
    """Show a recording in the view it was recorded in (one daemon, or a fleet)."""
    from llmd.tui.top.replay import ReplayClient, ReplayClock, read_recording

    recording = read_recording(path)
    if recording.is_truncated:
        print(
            f"note: the last line of {path} was cut (top was stopped while writing it); "
            f"replaying the {len(recording.snapshots)} whole snapshots",
            file=sys.stderr,
        )
    clock = ReplayClock(recording.snapshots[0].time, speed)
    addresses = recording.addresses()
    clients = [ReplayClient(recording.of(address), clock) for address in addresses]
    factories = [lambda client=client: client for client in clients]
    if len(addresses) == 1:
        from llmd.tui.top.app import create_top_app

        create_top_app(factories[0], addresses[0], interval_s).run()
        return
    from llmd.tui.top.fleet_app import DOWN_AFTER_INTERVALS, MIN_DOWN_AFTER_S, create_fleet_app

    recorded_interval_s = recording.interval_s() or interval_s
    down_after_s = max(MIN_DOWN_AFTER_S, DOWN_AFTER_INTERVALS * recorded_interval_s) / speed
    create_fleet_app(factories, addresses, interval_s, down_after_s=down_after_s).run()
