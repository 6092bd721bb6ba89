"""`llmd serve`'s side of the HTTP front end: bind the port, run and stop the HTTP process.

The port is bound (and listening) before the model loads, so a busy port fails in a
second and early clients wait in the backlog; the HTTP process (llmd.http.worker) talks
to the daemon over the daemon's own address, as any ZeroMQ client does.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import llmd
from llmd.daemon.serve_options import API_KEY_ENV
from llmd.errors import InvalidParameterError, LLMDError
from llmd.http.http_settings import HttpSettings

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 60.0
LOOPBACK_NAMES = ("localhost",)
LISTEN_BACKLOG = 2048
PORT_BUSY_RETRY_S = 2.0
"""How long a busy port is retried: a killed daemon's HTTP process may still be exiting."""


class HttpStartError(LLMDError):
    """The HTTP server process exited or did not come up."""

    code = "http_start_failed"


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HttpServer:
    """The OpenAI-compatible HTTP front end of one daemon (a child process)."""

    def __init__(self, settings: HttpSettings) -> None:
        if not is_loopback(settings.host) and not settings.allow_remote:
            raise InvalidParameterError(
                f"HTTP host {settings.host} is reachable from other machines; bind to "
                "127.0.0.1, or pass --allow-remote (and set --api-key)",
                "http_host",
            )
        self.settings = settings
        self._socket = _bind(settings.host, settings.port)
        self._process: subprocess.Popen[bytes] | None = None
        self._ready_fd: int | None = None
        self._lifeline_fd: int | None = None
        """Write end of a pipe the HTTP process watches: the kernel closes it when this
        process dies, even by SIGKILL, so the HTTP process frees the port at once."""

    @property
    def url(self) -> str:
        """http://HOST:PORT."""
        return self.settings.url

    def start(self) -> None:
        """Start the HTTP process on the bound socket (the daemon need not listen yet)."""
        ready_read, ready_write = os.pipe()
        lifeline_read, lifeline_write = os.pipe()
        env = dict(os.environ)
        env.pop(API_KEY_ENV, None)
        settings = self.settings
        if settings.api_key is not None:
            env[API_KEY_ENV] = settings.api_key
        package_root = str(Path(llmd.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        command = [
            sys.executable, "-m", "llmd.http",
            "--fd", str(self._socket.fileno()),
            "--ready-fd", str(ready_write),
            "--lifeline-fd", str(lifeline_read),
            "--daemon-address", settings.daemon_address,
            "--max-body-bytes", str(settings.max_body_bytes),
            "--graceful-shutdown-s", str(settings.graceful_shutdown_s),
            "--log-level", settings.log_level,
        ]  # fmt: skip
        try:
            self._process = subprocess.Popen(
                command,
                pass_fds=(self._socket.fileno(), ready_write, lifeline_read),
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # a terminal's Ctrl-C goes to the daemon, which drains
            )
        except BaseException:
            os.close(lifeline_write)
            raise
        finally:
            os.close(ready_write)
            os.close(lifeline_read)
        self._ready_fd = ready_read
        self._lifeline_fd = lifeline_write

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Block until the HTTP process serves; raise HttpStartError if it died or hung."""
        assert self._process is not None and self._ready_fd is not None  # start() first
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                readable, _, _ = select.select([self._ready_fd], [], [], 0.1)
                if readable and os.read(self._ready_fd, 1) == b"1":
                    logger.info("OpenAI-compatible HTTP API on %s", self.url)
                    return
                if self._process.poll() is not None:
                    raise HttpStartError(
                        f"the HTTP server process exited with code {self._process.returncode}"
                    )
            raise HttpStartError(f"the HTTP server was not ready after {timeout_s:.0f}s")
        finally:
            os.close(self._ready_fd)
            self._ready_fd = None

    def stop(self, timeout_s: float | None = None) -> None:
        """Let open responses finish (up to the graceful limit), then end the process."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout_s or self.settings.graceful_shutdown_s + 5)
            except subprocess.TimeoutExpired:
                logger.warning("the HTTP server did not stop in time; killing it")
                self._process.kill()
                self._process.wait()
        if self._ready_fd is not None:
            os.close(self._ready_fd)
            self._ready_fd = None
        if self._lifeline_fd is not None:  # only now: closing it first would skip the grace
            os.close(self._lifeline_fd)
            self._lifeline_fd = None
        self._socket.close()


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except OSError as error:
        raise InvalidParameterError(
            f"cannot resolve HTTP host {host}: {error}", "http_host"
        ) from None
    deadline = time.monotonic() + PORT_BUSY_RETRY_S
    while True:
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
            sock.listen(LISTEN_BACKLOG)  # clients that come early wait until the server is up
            return sock
        except OSError as error:
            sock.close()
            if error.errno == errno.EADDRINUSE and time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            raise InvalidParameterError(
                f"cannot listen for HTTP on {host}:{port}: {error.strerror}", "http_port"
            ) from None
