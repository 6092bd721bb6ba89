"""Runs the HTTP app with uvicorn on its own thread and event loop inside `llmd serve`.

The port is bound before the model loads, so a busy port fails in a second; the thread
talks to the daemon over the daemon's own address, as any ZeroMQ client does.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import threading

import uvicorn

from llmd.errors import InvalidParameterError
from llmd.http.app import create_app
from llmd.http.context import HttpContext

logger = logging.getLogger(__name__)

GRACEFUL_SHUTDOWN_S = 5.0
"""On stop, how long open connections may take to finish their last response."""
LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HttpServer:
    """The OpenAI-compatible HTTP front end of one daemon."""

    def __init__(
        self,
        host: str,
        port: int,
        daemon_address: str,
        *,
        allow_remote: bool = False,
        api_key: str | None = None,
        max_body_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        if not is_loopback(host) and not allow_remote:
            raise InvalidParameterError(
                f"HTTP host {host} is reachable from other machines; bind to 127.0.0.1, "
                "or pass --allow-remote (and set --api-key)",
                "http_host",
            )
        self.host = host
        self.port = port
        self.context = HttpContext(daemon_address, api_key, max_body_bytes)
        self._socket = _bind(host, port)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """http://HOST:PORT."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        """Serve on a new thread (the daemon need not be listening yet)."""
        config = uvicorn.Config(
            create_app(self.context),
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
            lifespan="on",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name="llmd-http", daemon=True)
        self._thread.start()
        logger.info("OpenAI-compatible HTTP API on %s", self.url)

    def stop(self, timeout_s: float = GRACEFUL_SHUTDOWN_S + 5) -> None:
        """Finish open responses (briefly), then close; safe if never started."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._socket.close()

    def _run(self) -> None:
        assert self._server is not None  # set by start()
        try:
            asyncio.run(self._server.serve(sockets=[self._socket]))
        except BaseException:  # the daemon keeps serving ZeroMQ clients
            logger.exception("the HTTP server stopped")


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as error:
        raise InvalidParameterError(
            f"cannot resolve HTTP host {host}: {error}", "http_host"
        ) from None
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        raise InvalidParameterError(
            f"cannot listen for HTTP on {host}:{port}: {error.strerror}", "http_port"
        ) from None
    sock.set_inheritable(False)
    return sock
