"""The drain's and the health state's decisions, by hand-picked times: no socket, no model."""

from __future__ import annotations

from llmd.daemon.drain_schedule import FORCED_STOP_GRACE_S, DrainSchedule, DrainStep
from llmd.daemon.outbox import Drain
from llmd.daemon.serving_state import ServingState
from llmd.errors import EngineDeadError, ShuttingDownError


def test_a_drain_waits_until_its_deadline_then_aborts_once_then_fails_the_rest():
    drain = DrainSchedule(default_timeout_s=30.0)
    assert drain.next_step(3, now=100.0) is DrainStep.NONE and not drain.is_draining
    drain.request(Drain(now=False, timeout_s=None), num_in_flight=3, now=100.0)
    assert drain.deadline == 130.0
    assert drain.next_step(3, now=129.9) is DrainStep.NONE
    assert drain.next_step(2, now=130.0) is DrainStep.ABORT_ALL
    assert drain.next_step(2, now=130.0 + FORCED_STOP_GRACE_S) is DrainStep.NONE  # grace
    assert drain.next_step(1, now=130.1 + FORCED_STOP_GRACE_S) is DrainStep.FAIL_ALL
    assert drain.summary() == "drained 1, aborted 2"  # 3 in flight, 2 left at the deadline


def test_the_earliest_deadline_holds_and_an_empty_daemon_stops_at_once():
    drain = DrainSchedule(default_timeout_s=30.0)
    drain.request(Drain(now=False, timeout_s=10.0, requester=(b"a", "s1")), 2, now=0.0)
    drain.request(Drain(now=False, timeout_s=60.0, requester=(b"b", "s2")), 2, now=1.0)
    assert drain.deadline == 10.0  # the later, longer request does not extend it
    drain.request(Drain(now=True, timeout_s=None), 2, now=2.0)
    assert drain.deadline == 2.0
    assert drain.requesters == [(b"a", "s1"), (b"b", "s2")]
    assert drain.next_step(0, now=2.0) is DrainStep.STOP
    assert drain.summary() == "drained 2, aborted 0"


def test_health_goes_warming_ok_dead_and_a_drain_outranks_a_death():
    state = ServingState(is_warming=True)
    assert state.value == "warming" and state.refusal() is None
    state.on_warm(1.5)
    assert state.value == "ok"
    state.on_engine_death("boom")
    state.on_engine_death("later")
    assert (state.value, state.dead_message, state.is_dead) == ("dead", "boom", True)
    refusal = state.refusal()
    assert isinstance(refusal, EngineDeadError) and "boom" in refusal.message
    draining = ServingState(is_warming=False)
    draining.on_drain()
    draining.on_engine_death("boom")
    assert (draining.value, draining.is_dead) == ("draining", False)
    assert isinstance(draining.refusal(), ShuttingDownError)
    draining.on_warm(0.1)  # a warm-up ending during a drain changes nothing
    assert draining.value == "draining"
