"""Two daemons behind SMG (cache-aware): stickiness, failover and rejoin.

Everything is asserted from each worker's own /metrics counters, never the router's logs:
a group of requests sharing a long system prompt lands on one worker, whose prefix hits
grow while the other's stay; after `kill -9` of one worker every request still succeeds
through the other; restarted on its port, the worker gets requests again.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.integration.router_fleet import LOAD_MONITOR_INTERVAL_S, Router, Worker, router_binary
from tests.tiny_model import make_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.soak]
"""About a minute (two daemons start twice): out of the default run, in `-m soak`."""

NUM_GROUPS = 4
REQUESTS_PER_GROUP = 6
MODEL_LEN = 2048
"""The fleet's context: room for a long request after a group's ~190-token prompt."""
LONG_MAX_TOKENS = 1536
"""A request that stays in flight while another is sent and served: about 1.7 s on one
thread of a 2026 EPYC core, ~1 ms a token (256 tokens ended before the next was sent)."""
WORDS = ("river", "stone", "lamp", "cloud", "garden", "window", "bridge", "forest")


def system_prompt(group: int) -> str:
    """A long system prompt (about 180 tokens: a dozen 16-token blocks) unique to `group`."""
    words = [WORDS[(group * 7 + i * (group + 3)) % len(WORDS)] for i in range(40)]
    return f"You are assistant number {group}. " + " ".join(words) + "."


def complete(router: Router, group: int, question: int, max_tokens: int = 4) -> httpx.Response:
    """One completion of the group's prompt through the router."""
    body = {"model": "tiny", "prompt": f"{system_prompt(group)} Question {question}:",
            "max_tokens": max_tokens, "ignore_eos": True}  # fmt: skip
    return httpx.post(f"{router.url}/v1/completions", json=body, timeout=60)


def _deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: value - before.get(name, 0.0) for name, value in after.items()}


@pytest.fixture
def fleet(tmp_path):
    """Two workers and the router in front of them; everything stopped at the end."""
    binary = router_binary()
    model_dir = make_tiny_model(tmp_path / "model", "llama", max_position_embeddings=MODEL_LEN)
    serve_args = ("--max-model-len", str(MODEL_LEN), "--num-blocks", "512")
    workers = [Worker(model_dir, tmp_path / f"worker-{i}", serve_args=serve_args)
               for i in range(2)]  # fmt: skip
    router = Router(binary, [w.url for w in workers], tmp_path / "router.log")
    try:
        for worker in workers:
            worker.start()
        router.start()
        yield router, workers
    finally:
        router.stop()
        for worker in workers:
            worker.stop()


def send_beside_a_long_one(
    router: Router,
    workers: list[Worker],
    long_group: int,
    long_question: int,
    group: int,
    question: int,
) -> tuple[int, int]:
    """Send `group`'s request while a long one of `long_group` runs, and return the index of
    the worker that ran the long one and of the worker that served the other.

    Each worker's own gauges and counters tell where each went: the long request is the
    only one running when the other is sent, and each worker's finished count grows by one
    for each request it served. SMG scores a worker by its last load report, which counts
    the requests it ran then, so the call first waits for reports of idle workers."""
    time.sleep(2 * LOAD_MONITOR_INTERVAL_S)
    before = [w.counters() for w in workers]
    with ThreadPoolExecutor(1) as pool:
        long_one = pool.submit(complete, router, long_group, long_question, LONG_MAX_TOKENS)
        deadline = time.monotonic() + 30
        while sum(w.num_running() for w in workers) == 0 and not long_one.done():
            assert time.monotonic() < deadline, "the long request never ran"
            time.sleep(0.01)
        assert not long_one.done(), "the long request ended before the next was sent"
        busy = [w.num_running() for w in workers].index(1)
        response = complete(router, group, question)
        assert response.status_code == 200, response.text
        assert not long_one.done(), "the long request ended before the other was served"
        assert long_one.result().status_code == 200
    deltas = [_deltas(b, w.counters())["requests"] for b, w in zip(before, workers)]
    assert sum(deltas) == 2, deltas
    if deltas[busy] == 2:
        return busy, busy
    [other] = [i for i, d in enumerate(deltas) if i != busy and d == 1]
    return busy, other


def place_first_requests(router: Router, workers: list[Worker]) -> list[int]:
    """Send each group's first request, the odd groups' while the even one before them is
    still running on a worker, and return the worker that served each group.

    No cached prefix matches a group's first request, so the router places it by load: with
    one request in flight it must pick the idle worker. Sent one after another to idle
    workers, the choice would be a tie that SMG may break either way."""
    served_by = []
    for group in range(0, NUM_GROUPS, 2):
        busy, other = send_beside_a_long_one(router, workers, group, 0, group + 1, 0)
        assert other == 1 - busy, (busy, other)  # the router saw the busy worker
        served_by += [busy, other]
    return served_by


def test_groups_stick_to_one_worker_and_survive_a_killed_one(fleet):
    router, workers = fleet
    served_by = place_first_requests(router, workers)
    # Then each group's further requests stick to one worker, whose prefix hits grow.
    owners = []
    for group in range(NUM_GROUPS):
        before = [w.counters() for w in workers]
        for question in range(1, REQUESTS_PER_GROUP):
            response = complete(router, group, question)
            assert response.status_code == 200, response.text
        deltas = [_deltas(b, w.counters()) for b, w in zip(before, workers)]
        [owner] = [i for i, d in enumerate(deltas) if d["requests"] > 0]  # one worker only
        other = deltas[1 - owner]
        assert deltas[owner]["requests"] == REQUESTS_PER_GROUP - 1
        assert deltas[owner]["prefix_cache_hits"] > 0  # the shared prompt was reused there
        assert other["requests"] == 0 and other.get("prefix_cache_hits", 0) == 0
        assert owner == served_by[group]  # where its first request went
        owners.append(owner)
    assert set(owners) == {0, 1}, owners  # both workers own groups

    # kill -9 one worker: every later request succeeds through the other.
    victim, survivor = workers[owners[0]], workers[1 - owners[0]]
    victim.kill()
    before = survivor.counters()
    num_after_kill = 12
    for question in range(num_after_kill):
        response = complete(router, question % NUM_GROUPS, 100 + question)
        assert response.status_code == 200, response.text
    assert _deltas(before, survivor.counters())["requests"] == num_after_kill

    # Restarted on its port, the worker rejoins: a new group sent while the survivor is busy
    # with a group it holds reaches the restarted worker.
    victim.start()
    time.sleep(3)  # a few of the router's 1 s health checks
    held = owners.index(1 - owners[0])  # a group only the survivor ever served
    busy, other = send_beside_a_long_one(router, workers, held, 200, NUM_GROUPS, 0)
    assert workers[busy] is survivor, "the long request of a group it holds left the survivor"
    assert workers[other] is victim, "the restarted worker got nothing"
