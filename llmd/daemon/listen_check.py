"""Whether the daemon's address can be bound: checked in a second, before the model loads.

Shared by the foreground start-up and `--detach`, which checks before it spawns the child.
"""

from __future__ import annotations

import os
import socket

from llmd.errors import InvalidParameterError
from llmd.protocol.address import Address


def check_can_listen(address: Address) -> None:
    """Fail in a second, not after the model loads, when the address cannot be bound."""
    if address.scheme == "ipc":
        directory = os.path.dirname(address.path)
        if not os.path.isdir(directory):
            raise InvalidParameterError(f"directory {directory} does not exist", "address")
        return
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    host = "" if address.host == "*" else address.host
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as zmq's listener does
        try:
            probe.bind((host, address.port))
        except OSError as error:
            raise InvalidParameterError(
                f"cannot listen on {address}: {error.strerror}", "address"
            ) from None
