"""Clients of the llmd daemon: `Client` (blocking) and `AsyncClient` (asyncio).

The only way the CLI and the terminal apps reach the daemon; it imports zmq, msgpack
and the torch-free protocol only, so it starts instantly on any machine.
"""

from __future__ import annotations

from llmd.client.async_client import AsyncClient
from llmd.client.completion import Completion, StreamEvent
from llmd.client.errors import DaemonNotRunningError, DaemonRestartedError, RequestLostError
from llmd.client.sync_client import Client
from llmd.protocol import Accepted, Finished, PrefillProgress, TokenDelta, default_address

__all__ = [
    "Accepted",
    "AsyncClient",
    "Client",
    "Completion",
    "DaemonNotRunningError",
    "DaemonRestartedError",
    "Finished",
    "PrefillProgress",
    "RequestLostError",
    "StreamEvent",
    "TokenDelta",
    "default_address",
]
