"""The clients' sans-IO core: routing, lost requests, liveness and refusals, with no socket."""

from __future__ import annotations

import pytest

import llmd.client.wire as wire
from llmd.client.client_core import ClientCore, health_dict, one_shot_reply
from llmd.client.errors import DaemonNotRunningError, DaemonRestartedError
from llmd.errors import InvalidParameterError, OverloadedError, RequestRejectedError
from llmd.protocol import (
    AbortRequest,
    Accepted,
    ErrorReply,
    Finished,
    GenerateRequest,
    HealthReply,
    HealthRequest,
    ProtocolError,
    ShutdownRequest,
    StatsReply,
    StatsRequest,
    SubscribeRequest,
    TokenDelta,
    UnsubscribeRequest,
    decode_daemon_message,
    encode,
)
from tests.protocol.snapshot_samples import sample_snapshot as stats_snapshot

ADDRESS = "ipc:///tmp/llmd-core-test.sock"


def health_reply(request_id: str, instance_id: str, **fields) -> HealthReply:
    return HealthReply(request_id, "ok", True, 1, "m", ADDRESS, 1.0, 0, "0", 1,
                       instance_id=instance_id, **fields)  # fmt: skip


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(wire.time, "monotonic", lambda: now[0])
    return now


def sent_generate(core: ClientCore) -> GenerateRequest:
    request = core.generate_request("hi", True)
    core.open(request.id, is_stream=True)
    core.sent(request)
    return request


def test_each_message_waits_in_the_inbox_of_its_own_request_in_order():
    core = ClientCore(ADDRESS, 5.0)
    first, second = sent_generate(core), sent_generate(core)
    assert first.id != second.id and first.id.split("-")[0] == second.id.split("-")[0]
    assert core.route(Accepted(second.id, "req-2", 3)) == [second.id]
    assert core.route(TokenDelta(first.id, "a", [1])) == [first.id]
    assert core.route(TokenDelta(second.id, "b", [2])) == [second.id]
    assert core.route(TokenDelta("someone-else", "c", [3])) == []  # nobody waits: dropped
    assert core.take(first.id) == TokenDelta(first.id, "a", [1])
    assert core.take(first.id) is None
    assert [core.take(second.id), core.take(second.id)] == [
        Accepted(second.id, "req-2", 3),
        TokenDelta(second.id, "b", [2]),
    ]
    core.close(first.id)
    assert core.route(TokenDelta(first.id, "late", [4])) == []  # closed: dropped
    assert core.take(first.id) is None


def test_receive_decodes_bytes_and_restarts_the_silence_clock(clock):
    core = ClientCore(ADDRESS, 5.0)
    request = sent_generate(core)
    clock[0] += 4.0
    assert core.receive(encode(Accepted(request.id, "req-1", 3))) == [request.id]
    clock[0] += 4.0
    assert core.check_silence() is not None  # a probe is due, but 4 s is no death
    assert isinstance(core.take(request.id), Accepted)


def test_error_replies_are_raised_as_their_classes_with_the_refusal_numbers():
    core = ClientCore(ADDRESS, 5.0)
    request = sent_generate(core)
    refusal = ErrorReply(request.id, "request_too_large", "prompt plus max_tokens ...",
                         "max_tokens", num_prompt_tokens=40, max_model_len=256,
                         max_fitting_tokens=216)  # fmt: skip
    core.receive(encode(refusal))
    with pytest.raises(RequestRejectedError) as error:
        core.take(request.id)
    assert (error.value.parameter, error.value.num_prompt_tokens, error.value.max_model_len,
            error.value.max_fitting_tokens) == ("max_tokens", 40, 256, 216)  # fmt: skip
    other = sent_generate(core)
    core.route(ErrorReply(other.id, "overloaded", "too busy"))
    with pytest.raises(OverloadedError, match="too busy"):
        core.take(other.id)
    assert core.in_flight.request_ids() == []  # an error is a request's last message


def test_the_refusal_numbers_travel_only_when_present():
    plain = ErrorReply("x", "overloaded", "too busy").to_wire()
    assert set(plain) == {"type", "v", "id", "code", "message", "parameter"}  # as before
    error = RequestRejectedError("no room", "prompt", num_prompt_tokens=300, max_model_len=256,
                                 max_fitting_tokens=0)  # fmt: skip
    reply = ErrorReply.from_error("x", error)
    assert decode_daemon_message(encode(reply)) == reply
    rebuilt = reply.to_error()
    assert (type(rebuilt), rebuilt.max_fitting_tokens, str(rebuilt)) == (
        RequestRejectedError, 0, "prompt: no room"
    )  # fmt: skip


def test_a_duplicate_id_refusal_does_not_end_the_stream_that_owns_the_id():
    core = ClientCore(ADDRESS, 5.0)
    request = sent_generate(core)
    assert core.route(ErrorReply(request.id, "duplicate_request_id", "in flight", "id")) == []
    assert core.take(request.id) is None
    assert core.in_flight.request_ids() == [request.id]


def test_a_restarted_daemon_fails_the_requests_of_the_old_one_at_once():
    core = ClientCore(ADDRESS, 5.0)
    request = sent_generate(core)
    core.route(Accepted(request.id, "req-1", 3, instance_id="old"))
    reached = core.route(health_reply("probe", "new"))
    assert reached == [request.id]
    assert isinstance(core.take(request.id), Accepted)
    with pytest.raises(DaemonRestartedError, match="instance old is gone"):
        core.take(request.id)
    assert core.in_flight.instance_id == "new"


def test_the_handshake_reply_teaches_the_message_limit():
    core = ClientCore(ADDRESS, 5.0)
    hello = core.hello()
    core.open(hello.id)
    core.receive(encode(health_reply(hello.id, "i1", max_message_bytes=64)))
    assert isinstance(core.take(hello.id), HealthReply)
    core.check_size(b"x" * 64)
    with pytest.raises(InvalidParameterError, match="at most 64"):
        core.check_size(b"x" * 65)


def test_silence_brings_a_probe_of_the_tracked_requests_then_gives_up(clock):
    core = ClientCore(ADDRESS, 3.0)
    request = sent_generate(core)
    for untracked in (HealthRequest(core.new_id()), ShutdownRequest(core.new_id())):
        core.sent(untracked)  # the daemon keeps no record of these: never probed for
    clock[0] += 1.0
    assert core.check_silence() is None  # probes go out after min(3 / 2, 2) s
    clock[0] += 0.5
    probe = core.check_silence()
    assert isinstance(probe, HealthRequest) and probe.request_ids == [request.id]
    assert core.check_silence() is None  # one probe at a time
    clock[0] += 1.5
    with pytest.raises(DaemonNotRunningError, match="no reply for 3s"):
        core.check_silence()


def test_a_changed_timeout_is_the_one_check_silence_uses(clock):
    core = ClientCore(ADDRESS, 1.0)
    core.liveness.timeout = 5.0
    clock[0] += 1.5
    assert core.check_silence() is None  # with the old 1 s timeout this was death


def test_stats_end_with_their_reply_and_subscriptions_go_on():
    core = ClientCore(ADDRESS, 5.0)
    stats = StatsRequest(core.new_id())
    subscription = SubscribeRequest(core.new_id())
    core.open(stats.id)
    core.open(subscription.id, is_subscription=True)
    core.sent(stats)
    core.sent(subscription)
    core.route(StatsReply(subscription.id, stats_snapshot(time=1.0)))
    core.route(StatsReply(stats.id, stats_snapshot(time=2.0)))
    assert core.in_flight.request_ids() == [subscription.id]
    assert one_shot_reply(core.take(stats.id)) == StatsReply(stats.id, stats_snapshot(time=2.0))
    with pytest.raises(ProtocolError):
        one_shot_reply(Finished(stats.id, "stop", None, [], {}, {}))
    assert "type" not in health_dict(health_reply("h", "i1"))


def test_a_broken_connection_wakes_every_waiter_and_closing_says_goodbye():
    core = ClientCore(ADDRESS, 5.0)
    stream = sent_generate(core)
    subscription = SubscribeRequest(core.new_id())
    core.open(subscription.id, is_subscription=True)
    broken = OSError("socket closed")
    assert sorted(core.fail_all(broken)) == sorted([stream.id, subscription.id])
    with pytest.raises(OSError, match="socket closed"):
        core.take(stream.id)
    assert core.farewells() == [AbortRequest(stream.id), UnsubscribeRequest(subscription.id)]
    core.close(stream.id)
    core.close(subscription.id)
    assert core.farewells() == []
