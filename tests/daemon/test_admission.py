"""Admission by SLO: requests that could not start within the TTFT target are refused at once.

The estimate is checked alone (rates, waits, the budget a request already used), then a
daemon under a flood must refuse some requests with `overloaded` before accepting them,
finish every one it accepted, and lose none.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from llmd.client import AsyncClient
from llmd.daemon.admission import Admission
from llmd.daemon.serve_options import ServeOptions
from llmd.errors import InvalidParameterError, LLMDError, OverloadedError
from tests.daemon.harness import inprocess_daemon


def _queued(*remaining: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(num_prompt_tokens=n + 10, num_computed_tokens=10) for n in remaining]


def test_nothing_measured_admits():
    admission = Admission(ttft_target_s=0.5)
    assert admission.prefill_tokens_per_s is None
    assert admission.check(_queued(10**6), 100, waited_s=0.0) is None


def test_the_rate_comes_from_steps_with_a_prefill():
    admission = Admission(ttft_target_s=1.0)
    admission.observe_step(0, 0.05)  # a decode-only step says nothing of prefill
    assert admission.prefill_tokens_per_s is None
    admission.observe_step(1000, 0.1)
    assert admission.prefill_tokens_per_s == pytest.approx(10_000)
    admission.observe_step(500, 0.1)  # slower now: the estimate moves toward it
    assert 5_000 < admission.prefill_tokens_per_s < 10_000


def test_a_request_past_the_budget_is_refused():
    admission = Admission(ttft_target_s=1.0)
    admission.observe_step(1000, 0.1)  # 10,000 tokens/s
    assert admission.estimated_wait_s(_queued(4000, 4000), 1000) == pytest.approx(0.9)
    assert admission.check(_queued(4000, 4000), 900, waited_s=0.0) is None  # 0.89 s <= 0.9
    refusal = admission.check(_queued(4000, 4000), 1100, waited_s=0.0)  # 0.91 s
    assert isinstance(refusal, OverloadedError)
    assert refusal.code == "overloaded" and "TTFT" in refusal.message
    assert admission.num_refused == 1


def test_time_already_waited_uses_up_the_budget():
    admission = Admission(ttft_target_s=1.0)
    admission.observe_step(1000, 0.1)
    assert admission.check(_queued(), 3000, waited_s=0.0) is None  # 0.3 s
    assert admission.check(_queued(), 3000, waited_s=0.7) is not None  # 0.3 > 0.9 - 0.7


def test_admission_slo_needs_a_ttft_target():
    with pytest.raises(InvalidParameterError) as raised:
        ServeOptions(admission="slo")
    assert raised.value.parameter == "admission"
    with pytest.raises(InvalidParameterError):
        ServeOptions(admission="drop", slo_ttft_ms=100)
    assert ServeOptions(admission="slo", slo_ttft_ms=100).admission == "slo"


class SlowPrefill(Admission):
    """A prefill rate fixed at 2,000 tokens/s, whatever the tiny model really does."""

    @property
    def prefill_tokens_per_s(self) -> float:
        return 2000.0

    def observe_step(self, num_prefill_tokens: int, step_s: float, num_decode_seqs: int = 0):
        pass


async def _outcome(client: AsyncClient, index: int) -> str:
    prompt = [5 + (index + k) % 90 for k in range(100)]
    try:
        completion = await client.generate(
            prompt_token_ids=prompt, params={"max_tokens": 4, "ignore_eos": True}
        )
    except LLMDError as error:
        return error.code
    assert len(completion.token_ids) == 4
    return "finished"


def test_a_flood_is_refused_early_and_nothing_is_lost(tiny_model_dir, tmp_path):
    address = f"ipc://{tmp_path / 'slo.sock'}"
    with inprocess_daemon(
        tiny_model_dir, address, admission="slo", slo_ttft_ms=500.0, max_queued_requests=4096
    ) as daemon:
        daemon.engine_loop.admission = SlowPrefill(0.5)  # budget 0.45 s: ~9 prompts of 100

        async def flood() -> list[str]:
            async with AsyncClient(address, timeout=60) as client:
                return await asyncio.gather(*(_outcome(client, i) for i in range(60)))

        outcomes = asyncio.run(flood())
        assert set(outcomes) <= {"finished", "overloaded"}, outcomes  # every one answered
        # At most ~9 can start in time at once; those that finish make room for later ones
        # (about 44 of 60 are refused here), so only a wide floor is safe on a slow machine.
        assert outcomes.count("overloaded") >= 10, outcomes
        assert outcomes.count("finished") >= 1, outcomes
        facts = daemon.engine_loop.admission
        assert facts.num_refused == outcomes.count("overloaded")


def test_slow_decode_steps_close_admission_while_requests_run():
    admission = Admission(ttft_target_s=2.0, tpot_target_s=0.1)
    admission.observe_step(1000, 0.1)  # a prefill-only step: no decode time yet
    assert admission.decode_step_s is None
    assert admission.check(_queued(), 10, waited_s=0.0, num_running=5) is None
    for _ in range(50):
        admission.observe_step(0, 0.095, num_decode_seqs=8)  # past 90% of 100 ms
    assert admission.decode_step_s == pytest.approx(0.095)
    refusal = admission.check(_queued(), 10, waited_s=0.0, num_running=8)
    assert refusal is not None and "TPOT" in refusal.message
    assert admission.check(_queued(), 10, waited_s=0.0, num_running=0) is None  # idle: admit
    for _ in range(50):
        admission.observe_step(0, 0.05, num_decode_seqs=4)  # the batch shrank: steps faster
    assert admission.check(_queued(), 10, waited_s=0.0, num_running=4) is None
