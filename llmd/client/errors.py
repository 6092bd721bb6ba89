"""The client-side error for "nobody is listening", with the command that fixes it."""

from __future__ import annotations

from llmd.errors import LLMDError
from llmd.protocol.address import default_address
from llmd.protocol.errors import register_error_class


class DaemonNotRunningError(LLMDError):
    """No llmd daemon answered at the address within the client's timeout."""

    code = "daemon_not_running"


register_error_class(DaemonNotRunningError)


def daemon_not_running(address: str, detail: str) -> DaemonNotRunningError:
    """The error, naming the address, what happened and the exact command to start a daemon."""
    command = "llmd serve" if address == default_address() else f"llmd serve --address {address}"
    return DaemonNotRunningError(
        f"no llmd daemon is answering at {address} ({detail}); start one with: {command}",
        "address",
    )


class RequestLostError(LLMDError):
    """The daemon has no record of a request the client still waits on; it will never end."""

    code = "request_lost"


class DaemonRestartedError(RequestLostError):
    """The daemon that held the request is gone and another instance serves the address."""

    code = "daemon_restarted"


register_error_class(RequestLostError)
register_error_class(DaemonRestartedError)
