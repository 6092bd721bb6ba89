"""What `Client` and `AsyncClient` share above the socket: their settings, stream, subscribe.

Both clients build a stream or a subscription the same way and differ only in how its
messages are waited for, so the two calls are written here once over the iterator each
client's `_events` and `_snapshots` return (sync or async).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

from llmd.client.client_core import ClientCore
from llmd.protocol import GenerateRequest, SubscribeRequest, default_address

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is Python 3.11+

    from llmd.client.request_options import GenerateOptions, SnapshotOptions

DEFAULT_TIMEOUT_S = 5.0
"""Seconds of silence after which a client considers the daemon gone, unless told."""

StreamT = TypeVar("StreamT")
SnapshotsT = TypeVar("SnapshotsT")


class ClientShell(Generic[StreamT, SnapshotsT]):
    """A client's core, read and set as plain attributes, and the calls that return iterators."""

    def __init__(self, address: str | None, timeout: float) -> None:
        self._core = ClientCore(address or default_address(), timeout)

    @property
    def address(self) -> str:
        """The daemon's address (ipc:// or tcp://)."""
        return self._core.address

    @address.setter
    def address(self, value: str) -> None:
        self._core.address = value

    @property
    def timeout(self) -> float:
        """Seconds of silence after which the daemon is considered gone."""
        return self._core.liveness.timeout

    @timeout.setter
    def timeout(self, value: float) -> None:
        self._core.liveness.timeout = value

    def stream(self, prompt: str | None = None, **options: Unpack[GenerateOptions]) -> StreamT:
        """Iterate (with AsyncClient, async-iterate) Accepted, PrefillProgress, TokenDelta and
        finally Finished events.

        The request is sent on the first next(); closing the iterator early (with
        AsyncClient `contextlib.aclosing`, or garbage collection) aborts it.
        """
        return self._events(self._core.generate_request(prompt, True, **options))

    def subscribe(self, interval_ms: int = 1000, **options: Unpack[SnapshotOptions]) -> SnapshotsT:
        """Iterate a snapshot every `interval_ms`; closing the iterator unsubscribes."""
        request = SubscribeRequest(self._core.new_id(), interval_ms=interval_ms, **options)
        return self._snapshots(request)

    def _events(self, request: GenerateRequest) -> StreamT:
        """Send `request` on first iteration, then yield its events until Finished."""
        raise NotImplementedError

    def _snapshots(self, request: SubscribeRequest) -> SnapshotsT:
        """Send `request` on first iteration, then yield each snapshot it brings."""
        raise NotImplementedError
