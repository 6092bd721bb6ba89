"""A real `llmd serve` process with its HTTP API on a free port, shared by the HTTP tests.

The daemon runs the tiny checkpoint exactly as a user would start it; tests reach it with
the official openai package, raw httpx, and the ZeroMQ client for independent counts.
"""

from __future__ import annotations

import httpx
import pytest

from tests.http.http_harness import DAEMON_ARGS, http_daemon


@pytest.fixture(scope="session")
def served_http(tiny_model_dir, tmp_path_factory):
    """`llmd serve --http-port PORT` on the tiny model; terminated (drained) at the end."""
    runtime = tmp_path_factory.mktemp("http-daemon")
    with http_daemon(tiny_model_dir, runtime, DAEMON_ARGS) as served:
        yield served
        url, log_path = served.url, served.log_path
    with pytest.raises(httpx.TransportError):  # the drained daemon stopped its HTTP process
        httpx.get(f"{url}/version", timeout=2)
    log = log_path.read_text()
    assert "Traceback" not in log, log
