"""`bench serve --http` against a small OpenAI-style SSE server written for the test."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from llmd.bench.serve import ServeOptions, run_serve_async
from llmd.errors import InvalidParameterError

pytest.importorskip("httpx")
MAX_PROMPT_TOKENS = 50


class CompletionsHandler(BaseHTTPRequestHandler):
    """Streams one "tok" chunk per requested token, a usage chunk, then [DONE]."""

    bodies: ClassVar[list[dict]] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append(body)
        if self.path != "/v1/completions" or len(body["prompt"]) > MAX_PROMPT_TOKENS:
            self.send_response(400)
            self.end_headers()
            self.wfile.write(b'{"error": "prompt too long"}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        num_tokens = body["max_tokens"]
        for index in range(num_tokens):
            finish = "length" if index == num_tokens - 1 else None
            chunk = {"choices": [{"index": 0, "text": " tok", "finish_reason": finish}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": num_tokens}
        self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args):
        pass


@pytest.fixture
def server_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), CompletionsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


async def test_http_serve_reads_the_sse_stream_and_counts_failures(server_url):
    CompletionsHandler.bodies.clear()
    options = ServeOptions(http_url=server_url, served_model="m", num_prompts=6, input_len=40,
                           output_len=5, range_ratio=0.5, vocab_size=100, seed=3,
                           show_progress=False, request_rate=100.0)  # fmt: skip
    result = await run_serve_async(options)
    lengths = [len(body["prompt"]) for body in CompletionsHandler.bodies]
    num_too_long = sum(1 for length in lengths if length > MAX_PROMPT_TOKENS)
    assert 0 < num_too_long < 6  # seed 3 draws prompts of 20..60 tokens on both sides of 50
    assert result["num_failed"] == num_too_long
    assert all("HTTP 400" in error for error in result["errors"])
    completed = [r for r in result["requests"] if r["status"] == "ok"]
    assert all(r["num_output_tokens"] == len(r["token_arrival_s"]) for r in completed)
    assert all(r["num_prompt_tokens"] <= MAX_PROMPT_TOKENS for r in completed)
    assert all(body["model"] == "m" and body["stream"] for body in CompletionsHandler.bodies)
    assert not any("return_timings" in body for body in CompletionsHandler.bodies)  # not llmd
    assert all(r["server_waits"] is None for r in result["requests"])
    assert result["latency_ms"]["ttft"]["count"] == 6 - num_too_long
    assert result["daemon"] is None


async def test_http_refuses_multi_turn_and_bad_urls():
    with pytest.raises(InvalidParameterError):
        await run_serve_async(ServeOptions(http_url="http://x", dataset="multi-turn"))
    with pytest.raises(InvalidParameterError):
        await run_serve_async(ServeOptions(http_url="ftp://x", vocab_size=10))
