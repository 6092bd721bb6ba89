"""The client with no daemon, a fake daemon, and in a process without torch."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import pytest
import zmq

from llmd.client import AsyncClient, Client, DaemonNotRunningError, TokenDelta
from llmd.client.errors import RequestLostError, daemon_not_running
from llmd.errors import InvalidParameterError, OverloadedError
from llmd.protocol import (
    AbortRequest,
    Accepted,
    ErrorReply,
    Finished,
    HealthReply,
    HealthRequest,
    decode_client_message,
    default_address,
    encode,
)
from tests.daemon.harness import REPO_ROOT, daemon_env, free_tcp_port

LONG_TIMEOUT_S = 60.0
"""A client timeout far beyond SLACK_S: failing "at once" is told from waiting it out."""
SLACK_S = 10.0
"""What "at once" or "by its timeout" may take on a loaded machine (a hang takes forever)."""
PROBED_TIMEOUT_S = 1.0
"""Timeout of clients that must hear a fake daemon's probe replies: a probe goes out after
half of it in silence, so the fake's thread has the other half to answer."""


def test_client_and_protocol_import_without_torch():
    code = (
        "import sys, llmd.client, llmd.protocol, llmd.metrics, llmd.commands.daemon_cli\n"
        "heavy = [m for m in ('torch', 'transformers', 'numpy') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=daemon_env(),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_missing_ipc_socket_fails_at_once_with_the_command(tmp_path):
    address = f"ipc://{tmp_path / 'nobody.sock'}"
    started = time.monotonic()
    with pytest.raises(DaemonNotRunningError) as error, Client(address, LONG_TIMEOUT_S) as client:
        client.health()
    assert time.monotonic() - started < SLACK_S
    assert f"llmd serve --address {address}" in str(error.value)
    assert error.value.code == "daemon_not_running"


def test_default_address_message_names_plain_llmd_serve():
    message = str(daemon_not_running(default_address(), "test"))
    assert message.endswith("start one with: llmd serve")


def test_silent_tcp_port_times_out_quickly():
    address = f"tcp://127.0.0.1:{free_tcp_port()}"
    started = time.monotonic()
    with pytest.raises(DaemonNotRunningError), Client(address, timeout=0.5) as client:
        client.stats()
    assert time.monotonic() - started < SLACK_S


async def test_async_client_without_daemon(tmp_path):
    async with AsyncClient(f"tcp://127.0.0.1:{free_tcp_port()}", timeout=0.4) as client:
        with pytest.raises(DaemonNotRunningError):
            await client.health()


def test_bad_requests_fail_before_sending():
    client = Client("ipc:///nonexistent/never-connected.sock")
    with pytest.raises(InvalidParameterError) as error:
        client.stream("x", params={"temperature": "hot"})
    assert error.value.parameter == "temperature"
    with pytest.raises(InvalidParameterError) as error:
        client.generate()
    assert error.value.parameter == "prompt"
    with pytest.raises(InvalidParameterError) as error:
        client.stream("x", params=3)  # type: ignore[arg-type]
    assert error.value.parameter == "params"


@pytest.mark.parametrize("client_class", [Client, AsyncClient])
def test_both_clients_take_the_same_keywords_and_refuse_others_before_sending(client_class):
    client = client_class("ipc:///nonexistent/never-connected.sock")
    with pytest.raises(InvalidParameterError) as error:
        client.stream(messages=[{"role": "user", "content": "hi"}], priority=2**40)
    assert error.value.parameter == "priority"
    with pytest.raises(TypeError, match="temprature"):
        client.stream("x", temprature=0.5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="include_blockmap"):
        client.subscribe(500, include_blockmap=False)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"prompt": "lone \ud800 surrogate"}, "prompt"),
        ({"messages": [{"role": "user", "content": "\udfff"}]}, "messages"),
        ({"prompt_token_ids": [1, 2**64]}, "prompt_token_ids"),
        ({"prompt": "x", "params": {"stop": ["\ud800"]}}, "stop"),
    ],
)
def test_values_msgpack_cannot_carry_are_typed_errors_naming_the_field(kwargs, field):
    address = f"tcp://127.0.0.1:{free_tcp_port()}"
    with Client(address, timeout=0.5) as client, pytest.raises(InvalidParameterError) as error:
        client.generate(**kwargs)
    assert error.value.parameter == field


class FakeDaemon:
    """A ROUTER on a thread that answers with scripted replies and records what it got.

    Handshakes are answered and not recorded; health probes are answered; after
    `finish_after_probes` of them it finishes the last generate request, and with
    `is_mute` it answers nothing at all after the script.
    """

    def __init__(self, address: str, script, finish_after_probes: int | None = None) -> None:
        self.address = address
        self.received: list = []
        self.is_mute = False
        self.forgets_requests = False
        """Probes are answered as instance "i1", which knows none of the probed ids."""
        self._script = script
        self._finish_after_probes = finish_after_probes
        self._socket = zmq.Context.instance().socket(zmq.ROUTER)
        self._socket.bind(address)
        self._is_stopped = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        last_generate = None
        num_probes = 0
        while not self._is_stopped:
            if not self._socket.poll(20):
                continue
            peer, payload = self._socket.recv_multipart()
            message = decode_client_message(payload)
            if isinstance(message, HealthRequest) and message.id.endswith("-hello"):
                reply = HealthReply(message.id, "ok", True, 1, "fake", self.address, 0.0, 0, "0", 1)
                self._socket.send_multipart([peer, encode(reply)])  # a new client's handshake
                continue
            self.received.append(message)
            replies = []
            if self.is_mute:
                continue
            if isinstance(message, HealthRequest):
                num_probes += 1
                lost = {"instance_id": "i1", "unknown_request_ids": message.request_ids or []}
                extra = lost if self.forgets_requests else {}
                reply = HealthReply(
                    message.id, "ok", True, 1, "fake", self.address, 0.0, 0, "0", 1, **extra
                )
                replies.append(reply)
                if num_probes == self._finish_after_probes and last_generate is not None:
                    replies.append(Finished(last_generate, "length", None, [1], {}, {}))
            elif not isinstance(message, AbortRequest):
                last_generate = message.id
                replies.extend(self._script(message))
            for reply in replies:
                self._socket.send_multipart([peer, encode(reply)])

    def close(self) -> None:
        self._is_stopped = True
        self._thread.join()
        self._socket.close(linger=0)


def _two_tokens(message):
    yield Accepted(message.id, "req-1", 3)
    yield TokenDelta(message.id, "a", [1])
    yield TokenDelta(message.id, "b", [2])


@pytest.fixture
def fake_address(tmp_path):
    return f"ipc://{tmp_path / 'fake.sock'}"


def test_closing_a_stream_early_sends_abort(fake_address):
    fake = FakeDaemon(fake_address, _two_tokens)
    try:
        with Client(fake.address, timeout=2.0) as client:
            stream = client.stream("hi")
            assert isinstance(next(stream), Accepted)
            request_id = next(stream).id
            stream.close()
            deadline = time.monotonic() + SLACK_S
            while len(fake.received) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
        assert fake.received[1] == AbortRequest(request_id)
    finally:
        fake.close()


def test_a_silent_but_alive_daemon_is_probed_not_abandoned(fake_address):
    fake = FakeDaemon(fake_address, _two_tokens, finish_after_probes=3)
    try:
        with Client(fake.address, timeout=PROBED_TIMEOUT_S) as client:
            started = time.monotonic()
            events = list(client.stream("slow"))
        assert isinstance(events[-1], Finished) and len(events) == 4
        assert time.monotonic() - started >= PROBED_TIMEOUT_S  # outlived it thanks to probes
        probes = [m for m in fake.received if isinstance(m, HealthRequest)]
        assert len(probes) == 3
    finally:
        fake.close()


def test_a_daemon_that_goes_quiet_raises_not_running(fake_address):
    fake = FakeDaemon(fake_address, _two_tokens)
    try:
        with Client(fake.address, timeout=0.3) as client:
            stream = client.stream("hang")
            assert isinstance(next(stream), Accepted)
            fake.is_mute = True
            started = time.monotonic()
            with pytest.raises(DaemonNotRunningError, match="no reply"):
                list(stream)
            assert time.monotonic() - started < SLACK_S
    finally:
        fake.close()


def test_a_duplicate_id_refusal_leaves_the_live_stream_alone(fake_address):
    def refused_midway(message):
        yield Accepted(message.id, "req-1", 3)
        yield TokenDelta(message.id, "a", [1])
        yield ErrorReply(message.id, "duplicate_request_id", "already in flight", "id")
        yield TokenDelta(message.id, "b", [2])
        yield Finished(message.id, "length", None, [1, 2], {}, {})

    fake = FakeDaemon(fake_address, refused_midway)
    try:
        with Client(fake.address) as client:
            events = list(client.stream("x"))
        assert [type(e).__name__ for e in events] == [
            "Accepted", "TokenDelta", "TokenDelta", "Finished"
        ]  # fmt: skip
    finally:
        fake.close()


def _raised(stream) -> Exception | None:
    try:
        next(stream)
    except Exception as error:
        return error
    return None


def _accepted_then_silent(message):
    yield Accepted(message.id, "req-1", 3, instance_id="i1")


def test_a_request_the_daemon_has_no_record_of_fails_at_once(fake_address):
    fake = FakeDaemon(fake_address, _accepted_then_silent)
    fake.forgets_requests = True  # as after a dropped connection: the daemon lives on
    try:
        outcome: dict[str, object] = {}
        with Client(fake.address, timeout=PROBED_TIMEOUT_S) as client:
            stream = client.stream("x")
            accepted = next(stream)
            assert isinstance(accepted, Accepted)
            waiter = threading.Thread(target=lambda: outcome.update(error=_raised(stream)))
            waiter.start()
            waiter.join(10)
            assert not waiter.is_alive(), "the client waits forever on a forgotten request"
        assert isinstance(outcome["error"], RequestLostError)
        assert outcome["error"].code == "request_lost"
        probes = [m for m in fake.received if isinstance(m, HealthRequest)]
        assert probes[0].request_ids == [accepted.id]
    finally:
        fake.close()


async def test_the_async_client_fails_a_forgotten_request_too(fake_address):
    fake = FakeDaemon(fake_address, _accepted_then_silent)
    fake.forgets_requests = True
    try:
        async with AsyncClient(fake.address, timeout=PROBED_TIMEOUT_S) as client:
            stream = client.stream("x")
            assert isinstance(await anext(stream), Accepted)
            with pytest.raises(RequestLostError):
                await asyncio.wait_for(anext(stream), 10)
            await stream.aclose()
    finally:
        fake.close()


def test_error_replies_raise_their_classes(fake_address):
    def refuse(message):
        yield ErrorReply(message.id, "overloaded", "too busy", None)

    fake = FakeDaemon(fake_address, refuse)
    try:
        with Client(fake.address) as client, pytest.raises(OverloadedError, match="too busy"):
            client.generate("x")
    finally:
        fake.close()


@pytest.mark.parametrize("client_class", [Client, AsyncClient])
def test_refused_tcp_address_fails_at_once(client_class):
    address = f"tcp://127.0.0.1:{free_tcp_port()}"  # nothing listens there
    started = time.monotonic()
    with pytest.raises(DaemonNotRunningError) as error:
        if client_class is Client:
            with Client(address, timeout=LONG_TIMEOUT_S) as client:
                client.health()
        else:

            async def probe() -> None:
                async with AsyncClient(address, timeout=LONG_TIMEOUT_S) as client:
                    await client.health()

            asyncio.run(probe())
    assert time.monotonic() - started < SLACK_S  # not the 60 s timeout
    assert "nothing listens on 127.0.0.1" in str(error.value)
