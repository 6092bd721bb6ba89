"""Mixed lifecycles: complete, abort, stream, non-stream, bad request, vanished client.

Thousands of short request lifecycles of every kind run with bounded concurrency; at
the end the daemon must hold no KV block and its resident memory must not have grown
after warm-up, which is how a slow leak shows long before it becomes an outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter

import zmq
import zmq.asyncio

from llmd.client import AsyncClient, Finished, TokenDelta
from llmd.errors import LLMDError
from llmd.protocol import pack
from scripts.soak_suite.daemon_process import DaemonProcess, used_blocks
from scripts.soak_suite.result import ScenarioResult
from scripts.soak_suite.streams import CLIENT_TIMEOUT_S, prompt_for

KINDS = (
    "stream_complete",
    "nonstream_complete",
    "stream_abort",
    "stream_close",
    "nonstream_abort",
    "bad_request",
    "vanished_client",
)
WARMUP_FRACTION = 0.2
RSS_GROWTH_LIMIT = 0.05
NUM_RSS_SAMPLES = 10


def run_lifecycles(
    daemon: DaemonProcess, num_lifecycles: int = 10_000, concurrency: int = 32, seed: int = 0
) -> ScenarioResult:
    """Run `num_lifecycles` mixed lifecycles; 0 unexpected outcomes, 0 leaked blocks, flat RSS."""
    result = ScenarioResult("lifecycles")
    rss_kb: list[int] = []
    outcomes = asyncio.run(_lifecycles(daemon, num_lifecycles, concurrency, seed, rss_kb))
    idle = daemon.wait_idle()
    rss_kb.append(daemon.rss_kb())
    tally = Counter(outcomes)
    unexpected = {k: v for k, v in tally.items() if not k.endswith(":ok")}
    warm_index = max(1, round(WARMUP_FRACTION * NUM_RSS_SAMPLES)) - 1
    rss_warm = rss_kb[warm_index]
    rss_after = max(rss_kb[warm_index:])
    growth = (rss_after - rss_warm) / rss_warm
    result.counts.update(
        {
            "num_lifecycles": num_lifecycles,
            "concurrency": concurrency,
            "outcomes": dict(sorted(tally.items())),
            "num_unexpected": sum(unexpected.values()),
            "used_blocks_at_idle": used_blocks(idle),
            "num_in_flight_at_idle": idle.daemon.num_in_flight,
            "rss_kb_samples": rss_kb,
            "rss_kb_after_warmup": rss_warm,
            "rss_kb_max_after_warmup": rss_after,
            "rss_growth_after_warmup": round(growth, 4),
        }
    )
    result.check("every lifecycle ended as expected", not unexpected, f"{unexpected}")
    result.check(
        "0 leaked blocks at idle",
        used_blocks(idle) == 0 and idle.daemon.num_in_flight == 0,
        f"{used_blocks(idle)} used, {idle.daemon.num_in_flight} in flight",
    )
    result.check(
        f"RSS flat within {RSS_GROWTH_LIMIT:.0%} after warm-up",
        growth <= RSS_GROWTH_LIMIT,
        f"{rss_warm} -> {rss_after} KiB ({growth:+.1%})",
    )
    return result.finish()


async def _lifecycles(
    daemon: DaemonProcess, num_lifecycles: int, concurrency: int, seed: int, rss_kb: list[int]
) -> list[str]:
    rng = random.Random(seed)
    plan = [(rng.choice(KINDS), rng.randint(1, 8)) for _ in range(num_lifecycles)]
    clients = [AsyncClient(daemon.address, CLIENT_TIMEOUT_S) for _ in range(8)]
    raw_context = zmq.asyncio.Context.instance()
    outcomes: list[str] = []
    sample_every = max(1, num_lifecycles // NUM_RSS_SAMPLES)
    next_index = iter(range(num_lifecycles))

    async def worker(worker_id: int) -> None:
        for index in next_index:
            kind, max_tokens = plan[index]
            client = clients[index % len(clients)]
            try:
                outcome = await asyncio.wait_for(
                    _one(client, raw_context, daemon.address, kind, index, max_tokens),
                    4 * CLIENT_TIMEOUT_S,
                )
            except asyncio.TimeoutError:
                outcome = "hung"
            outcomes.append(f"{kind}:{outcome}")
            if (index + 1) % sample_every == 0 and len(rss_kb) < NUM_RSS_SAMPLES - 1:
                rss_kb.append(daemon.rss_kb())

    try:
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    finally:
        for client in clients:
            await client.close()
    return outcomes


async def _one(
    client: AsyncClient,
    raw_context: zmq.asyncio.Context,
    address: str,
    kind: str,
    index: int,
    max_tokens: int,
) -> str:
    """One lifecycle; returns "ok" when it ended the way its kind promises."""
    prompt = prompt_for(index)
    params = {"max_tokens": max_tokens, "ignore_eos": True, "temperature": 0.8, "seed": index}
    try:
        if kind == "bad_request":
            try:
                await client.generate(prompt, params={"max_tokens": max_tokens, "top_p": 1.5})
            except LLMDError as error:
                is_typed = error.code == "invalid_parameter" and error.parameter == "top_p"
                return "ok" if is_typed else f"{error.code}/{error.parameter}"
            return "accepted"
        if kind == "nonstream_complete":
            completion = await client.generate(prompt, params=params)
            return "ok" if len(completion.token_ids) == max_tokens else "short"
        if kind == "vanished_client":
            return await _vanish(raw_context, address, prompt, max_tokens, index)
        long_params = {**params, "max_tokens": 64} if kind != "stream_complete" else params
        if kind == "nonstream_abort":
            task = asyncio.ensure_future(client.generate(prompt, params=long_params))
            await asyncio.sleep(0.005)
            task.cancel()  # cancelling closes the event stream, which sends the abort
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return "ok"
        return await _stream(client, kind, prompt, long_params)
    except LLMDError as error:
        return f"error:{error.code}"


async def _stream(client: AsyncClient, kind: str, prompt: str, params: dict) -> str:
    num_tokens = 0
    async with contextlib.aclosing(client.stream(prompt, params=params)) as events:
        async for event in events:
            if isinstance(event, TokenDelta):
                num_tokens += len(event.token_ids)
                if kind == "stream_close":
                    return "ok"  # leaving the block closes the stream: abort
                if kind == "stream_abort" and num_tokens == len(event.token_ids):
                    await client.abort(event.id)
            elif isinstance(event, Finished):
                if kind == "stream_abort":
                    is_ok = event.finish_reason in ("abort", "length")
                else:
                    is_ok = event.finish_reason == "length" and num_tokens == params["max_tokens"]
                return "ok" if is_ok else f"finished:{event.finish_reason}"
    return "no finished message"


async def _vanish(
    context: zmq.asyncio.Context, address: str, prompt: str, max_tokens: int, index: int
) -> str:
    """A client that sends a generate, reads `accepted`, then disappears without an abort."""
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(address)
    try:
        request = {
            "type": "generate", "v": 1, "id": f"vanish-{index}", "prompt": prompt,
            "sampling_params": {"max_tokens": max_tokens, "ignore_eos": True},
        }  # fmt: skip
        await socket.send(pack(request))
        if not await socket.poll(int(CLIENT_TIMEOUT_S * 1000)):
            return "no accepted"
        await socket.recv_multipart()  # `accepted` (and whatever came with it)
        return "ok"
    finally:
        socket.close(linger=0)
