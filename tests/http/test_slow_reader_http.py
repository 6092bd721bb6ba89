"""An HTTP client that stops reading a long stream holds up nobody; it gets it all later.

The stream (12 choices x 450 tokens x 20 logprobs, about 3.5 MB) is larger than loopback's
socket buffers (4 MB at most, shared with the kernel's receive side), so uvicorn stops
writing to the unread socket and the route waits; the daemon requests run to their end
regardless, and the HTTP process holds what is unread: at most the request's
n x max_tokens chunks.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time

import httpx

from llmd.client import Client

NUM_CHOICES = 12
MAX_TOKENS = 450


def test_an_http_client_that_stops_reading_holds_up_nobody(served_http):
    fields = {"prompt": "unread", "n": NUM_CHOICES, "max_tokens": MAX_TOKENS, "logprobs": 20}
    body = json.dumps({**fields, "stream": True, "ignore_eos": True}).encode()
    host, port = served_http.url.removeprefix("http://").split(":")
    num_before = _num_finished_by_length(served_http)
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(30)
    with contextlib.closing(raw):
        raw.connect((host, int(port)))
        raw.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        for index in range(3):  # others are served meanwhile
            response = httpx.post(
                f"{served_http.v1}/completions",
                json={"prompt": f"meanwhile {index}", "max_tokens": 8, "ignore_eos": True},
                timeout=30,
            )
            assert response.status_code == 200, response.text
        deadline = time.monotonic() + 60  # the unread choices ran to their end, unread
        while _num_finished_by_length(served_http) < num_before + NUM_CHOICES + 3:
            assert time.monotonic() < deadline, _num_finished_by_length(served_http) - num_before
            time.sleep(0.05)
        served_http.wait_idle(timeout_s=30)
        received = b""
        while not received.endswith(b"\r\n0\r\n\r\n"):  # the last chunk of the body
            chunk = raw.recv(65536)
            if not chunk:
                break
            received += chunk
    text = received.decode()
    assert text.startswith("HTTP/1.1 200") and "data: [DONE]" in text
    choices = [
        json.loads(line.removeprefix("data: "))["choices"][0]
        for line in text.splitlines()
        if line.startswith("data: {")
    ]
    assert [c["finish_reason"] for c in choices if c["finish_reason"]] == ["length"] * NUM_CHOICES
    num_tokens = sum(len(c["logprobs"]["tokens"]) for c in choices if c["logprobs"])
    assert num_tokens == NUM_CHOICES * MAX_TOKENS


def _num_finished_by_length(served_http) -> int:
    with Client(served_http.address) as client:
        snapshot = client.stats(include_requests=False, include_block_map=False)
    return snapshot.totals.finished.get("length", 0)
