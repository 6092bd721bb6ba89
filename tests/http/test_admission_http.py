"""`--admission slo` over HTTP: a flood gets some 429s (overloaded, Retry-After) before any
stream starts, every other stream completes, and none is lost."""

from __future__ import annotations

import asyncio
import json

import httpx

from llmd.client import Client
from tests.http.http_harness import DAEMON_ARGS, http_daemon

NUM_REQUESTS = 80


async def _one(client: httpx.AsyncClient, url: str, index: int) -> tuple[int, str]:
    body = {
        "prompt": [5 + (index + k) % 90 for k in range(200)],
        "max_tokens": 4, "ignore_eos": True, "stream": True,
    }  # fmt: skip
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        if response.status_code != 200:
            error = json.loads(await response.aread())["error"]
            assert response.headers.get("retry-after"), response.headers
            return response.status_code, error["code"]
        num_chunks = 0
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                num_chunks += 1
            elif line == "data: [DONE]":
                return 200, f"{num_chunks} chunks"
    return 200, "no [DONE]"


def test_a_flood_gets_429s_early_and_every_admitted_stream_completes(tiny_model_dir, tmp_path):
    args = [*DAEMON_ARGS, "--admission", "slo", "--slo-ttft-ms", "20"]
    with http_daemon(tiny_model_dir, tmp_path, args) as served:
        warm = httpx.post(
            f"{served.url}/v1/completions",
            json={"prompt": [7] * 200, "max_tokens": 2},
            timeout=30,
        )  # the first steps measure the prefill rate admission works from
        assert warm.status_code == 200, warm.text

        async def flood() -> list[tuple[int, str]]:
            limits = httpx.Limits(max_connections=NUM_REQUESTS + 4)
            async with httpx.AsyncClient(timeout=60, limits=limits) as client:
                return await asyncio.gather(
                    *(_one(client, served.url, i) for i in range(NUM_REQUESTS))
                )

        outcomes = asyncio.run(flood())
        refused = [o for o in outcomes if o[0] != 200]
        completed = [o for o in outcomes if o[0] == 200]
        assert len(refused) + len(completed) == NUM_REQUESTS
        assert refused and all(o == (429, "overloaded") for o in refused), outcomes
        assert completed and all(o[1] == "5 chunks" for o in completed), outcomes  # 4 + final
        with Client(served.address, timeout=10) as client:
            facts = client.stats(include_requests=False, include_block_map=False).daemon
        assert facts.admission == "slo"
        assert facts.num_refused_by_admission == len(refused)
