"""64 concurrent streaming HTTP clients: every stream completes and the KV cache empties."""

from __future__ import annotations

import asyncio
import json

import httpx

NUM_CLIENTS = 64
NUM_TOKENS = 16


async def _one_stream(client: httpx.AsyncClient, url: str, index: int) -> dict:
    body = {
        "prompt": f"Client number {index} says",
        "max_tokens": NUM_TOKENS,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    payloads = []
    async with client.stream("POST", url, json=body) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                payloads.append(line.removeprefix("data: "))
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert not any("error" in chunk for chunk in chunks)
    return {
        "text": "".join(c["choices"][0]["text"] for c in chunks if c["choices"]),
        "reason": [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1],
        "usage": chunks[-1]["usage"],
    }


async def _run_all(url: str) -> list[dict]:
    limits = httpx.Limits(max_connections=NUM_CLIENTS)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        return await asyncio.gather(*(_one_stream(client, url, i) for i in range(NUM_CLIENTS)))


def test_64_concurrent_streams_complete_and_leave_no_kv_in_use(served_http):
    results = asyncio.run(_run_all(f"{served_http.v1}/completions"))
    assert len(results) == NUM_CLIENTS
    assert {r["reason"] for r in results} == {"length"}
    assert {r["usage"]["completion_tokens"] for r in results} == {NUM_TOKENS}
    assert served_http.wait_idle(timeout_s=5.0) < 5.0
    assert served_http.kv_used_and_running() == (0, 0)
