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

from tests.integration.router_fleet import Router, Worker, router_binary

pytestmark = [pytest.mark.slow, pytest.mark.soak]
"""About a minute (two daemons start twice): out of the default run, in `-m soak`."""

NUM_GROUPS = 4
REQUESTS_PER_GROUP = 6
LONG_MAX_TOKENS = 256
"""A first request that runs long enough (about a second on one thread) to be in flight."""
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
def fleet(tiny_model_dir, tmp_path):
    """Two workers and the router in front of them; everything stopped at the end."""
    binary = router_binary()
    workers = [Worker(tiny_model_dir, tmp_path / f"worker-{i}") for i in range(2)]
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


def place_first_requests(router: Router, workers: list[Worker]) -> list[int]:
    """Send each group's first request, the odd groups' while the even one before them is
    still running on a worker, and return the worker that served each group.

    No cached prefix matches a group's first request, so the router places it by load: with
    one request in flight it must pick the idle worker. Sent one after another to idle
    workers, the choice would be a tie that SMG may break either way."""
    served_by = []
    for group in range(0, NUM_GROUPS, 2):
        before = [w.counters() for w in workers]
        with ThreadPoolExecutor(1) as pool:
            long_one = pool.submit(complete, router, group, 0, LONG_MAX_TOKENS)
            deadline = time.monotonic() + 30
            while sum(w.num_running() for w in workers) == 0 and not long_one.done():
                assert time.monotonic() < deadline, "the long request never ran"
                time.sleep(0.01)
            assert not long_one.done(), "the long request ended before the next was sent"
            busy = [w.num_running() for w in workers].index(1)
            assert complete(router, group + 1, 0).status_code == 200
            assert long_one.result().status_code == 200
        deltas = [_deltas(b, w.counters())["requests"] for b, w in zip(before, workers)]
        assert sorted(deltas) == [1, 1], deltas  # one each: the router saw the busy worker
        served_by += [busy, 1 - busy]
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

    # Restarted on its port, the worker rejoins: new groups reach it again.
    victim.start()
    time.sleep(3)  # a few of the router's 1 s health checks
    before = victim.counters()
    for group in range(NUM_GROUPS, NUM_GROUPS + 8):
        assert complete(router, group, 0).status_code == 200
        if _deltas(before, victim.counters())["requests"] > 0:
            break
    assert _deltas(before, victim.counters())["requests"] > 0, "the restarted worker got nothing"
