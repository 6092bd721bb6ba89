"""A daemon that dies and is replaced at once: no client waits forever, nothing stale runs.

Daemon A is a bare ROUTER that answers like a daemon (its instance id, `accepted`) and then
vanishes without a word, as a daemon killed with -9 does; daemon B, started on the same
address right away, is a real in-process Daemon whose engine was built beforehand, so the
restart takes well under the client's timeout (the case that used to hang forever).
"""

from __future__ import annotations

import logging
import threading

import pytest
import zmq

from llmd.client import Accepted, Client, DaemonNotRunningError
from llmd.client.errors import DaemonRestartedError
from llmd.protocol import GenerateRequest, HealthReply, HealthRequest, decode_client_message, encode
from llmd.sampling_params import SamplingParams

LONG = SamplingParams(temperature=0.0, max_tokens=240, ignore_eos=True)
DEAD_INSTANCE = "0dead0instance00"


class DoomedDaemon:
    """Answers health and accepts generates as instance DEAD_INSTANCE until `crash()`."""

    def __init__(self, address: str) -> None:
        self._socket = zmq.Context.instance().socket(zmq.ROUTER)
        self._socket.bind(address)
        self.address = address

    def answer(self, num_messages: int) -> None:
        """Answer the next `num_messages` messages."""
        for _ in range(num_messages):
            assert self._socket.poll(10_000), "the client sent nothing"
            peer, payload = self._socket.recv_multipart()
            message = decode_client_message(payload)
            if isinstance(message, HealthRequest):
                reply = HealthReply(
                    message.id, "ok", True, 1, "m", self.address, 1.0, 0, "0", 1,
                    instance_id=DEAD_INSTANCE,
                )  # fmt: skip
            else:
                assert isinstance(message, GenerateRequest)
                reply = Accepted(message.id, "req-1", 3, instance_id=DEAD_INSTANCE)
            self._socket.send_multipart([peer, encode(reply)])

    def crash(self) -> None:
        """Vanish without a goodbye (nothing queued is delivered)."""
        self._socket.close(linger=0)


def _daemon_factory(model_dir, address: str):
    from llmd.config import EngineConfig
    from llmd.daemon.serve_options import ServeOptions
    from llmd.daemon.server import Daemon
    from llmd.llm_engine import LLMEngine
    from llmd.protocol import parse_address
    from tests.scheduling_mode import engine_kwargs

    config = EngineConfig(model=str(model_dir), num_blocks=256, max_model_len=256,
                          **engine_kwargs())  # fmt: skip
    engine = LLMEngine(config)
    return lambda: Daemon(engine, ServeOptions(address=address), parse_address(address))


NUM_ROUNDS = 3


def test_quick_restart_fails_old_requests_and_runs_no_stale_ones(tiny_model_dir, tmp_path, caplog):
    """The stale generate is sent on a connection A just closed; if the client's I/O thread
    has not seen the close yet, the message is written into the dead connection and lost
    (nothing stale runs, but the drop on arrival goes unexercised): such a round is run
    again, and one round must show the new daemon dropping the stale request."""
    caplog.set_level(logging.INFO, logger="llmd.daemon.server")
    for index in range(NUM_ROUNDS):
        caplog.clear()
        _restart_round(tiny_model_dir, f"ipc://{tmp_path / f'restart-{index}.sock'}")
        if "dropping request" in caplog.text:
            return
    pytest.fail(f"the stale generate never reached the new daemon in {NUM_ROUNDS} rounds")


def _restart_round(tiny_model_dir, address: str) -> None:
    """One crash and restart; everything but the stale request's arrival is asserted."""
    new_daemon = _daemon_factory(tiny_model_dir, address)
    old = DoomedDaemon(address)
    waiting = Client(address, timeout=6.0)  # outlives the restart: only the instance id tells
    late = Client(address, timeout=0.5)
    outcome: dict[str, object] = {}
    daemon = None
    try:
        answering = threading.Thread(target=old.answer, args=(4,))
        answering.start()  # two handshakes, the generate and late's health
        stream = waiting.stream(prompt_token_ids=[1, 2, 3], params=LONG)
        assert isinstance(next(stream), Accepted)
        late.health()
        answering.join(10)
        old.crash()

        def drain_stream() -> None:
            try:
                for _ in stream:
                    pass
                outcome["result"] = "finished"
            except Exception as error:
                outcome["result"] = error

        consumer = threading.Thread(target=drain_stream, daemon=True)
        consumer.start()
        with pytest.raises(DaemonNotRunningError):  # sent while no daemon was up
            late.generate("stale", params={"max_tokens": 2})
        daemon = new_daemon()
        daemon.bind()
        threading.Thread(target=daemon.serve_forever, daemon=True).start()
        consumer.join(30)
        assert not consumer.is_alive(), "the client still waits on a request B never had"
        assert isinstance(outcome["result"], DaemonRestartedError)
        assert outcome["result"].code == "daemon_restarted"
        with Client(address, timeout=10.0) as fresh:
            assert fresh.generate("new", params={"max_tokens": 2}).finish_reason == "length"
            late.health()  # answered after B saw the stale generate queued before it
            snapshot = fresh.stats(include_block_map=False)
        assert [row.num_generated_tokens for row in snapshot.recent] == [2]  # "new" only
    finally:
        waiting.close()
        late.close()
        if daemon is not None:
            daemon.request_drain(now=True)
