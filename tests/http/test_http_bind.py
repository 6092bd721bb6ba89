"""Binding the HTTP port: a port that frees up within a moment is taken; a busy one is an error.

A killed daemon's HTTP process may hold the port for a moment after the kill; a restart
right away must wait for it rather than fail, and a port that stays busy must still fail
with a typed error naming `http_port`.
"""

from __future__ import annotations

import socket
import threading

import pytest

from llmd.errors import InvalidParameterError
from llmd.http.http_settings import HttpSettings
from llmd.http.server import PORT_BUSY_RETRY_S, HttpServer


def _listening_socket() -> tuple[socket.socket, int]:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder, holder.getsockname()[1]


def test_a_port_freed_during_the_retry_window_is_taken():
    holder, port = _listening_socket()
    threading.Timer(PORT_BUSY_RETRY_S / 4, holder.close).start()
    server = HttpServer(HttpSettings("127.0.0.1", port, "ipc:///nonexistent/d.sock"))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # it listens
    finally:
        server.stop()


def test_a_port_that_stays_busy_is_a_typed_error():
    holder, port = _listening_socket()
    try:
        with pytest.raises(InvalidParameterError) as raised:
            HttpServer(HttpSettings("127.0.0.1", port, "ipc:///nonexistent/d.sock"))
    finally:
        holder.close()
    assert raised.value.parameter == "http_port"
    assert f"cannot listen for HTTP on 127.0.0.1:{port}" in str(raised.value)
    assert "in use" in str(raised.value)
