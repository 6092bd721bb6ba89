"""Requests the daemon must refuse cheaply and precisely, without holding up anyone else.

Regression tests for issue 9: bad token ids, prompts far beyond the context, a prompt that
takes long to tokenize, and a generate that reuses an id still in flight.
"""

from __future__ import annotations

import threading

import pytest

from llmd.client import Client, Finished
from llmd.client.context_fit import MaxTokensCut
from llmd.client.fitted_stream import stream_fitted
from llmd.errors import InvalidParameterError, RequestRejectedError
from llmd.protocol import ErrorReply, pack
from llmd.sampling_params import SamplingParams
from tests.daemon.harness import RawPeer, inprocess_daemon

MAX_MESSAGE_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def daemon(tiny_model_dir, tmp_path_factory):
    """One in-process daemon for the module."""
    address = f"ipc://{tmp_path_factory.mktemp('refusals') / 'd.sock'}"
    with inprocess_daemon(tiny_model_dir, address, max_message_bytes=MAX_MESSAGE_BYTES) as served:
        yield served


def _generate_map(request_id: str, **fields) -> dict:
    return {"type": "generate", "v": 1, "id": request_id, **fields}


class _GatedTokenizer:
    """Delegates to the real tokenizer; encoding `gated_prompt` waits for `gate`."""

    def __init__(self, tokenizer, gated_prompt: str) -> None:
        self._tokenizer = tokenizer
        self.gated_prompt = gated_prompt
        self.gate = threading.Event()
        self.encoded: list[int] = []

    def encode(self, text: str) -> list[int]:
        self.encoded.append(len(text))
        if text == self.gated_prompt:
            self.gate.wait(30)
        return self._tokenizer.encode(text)

    def __getattr__(self, name: str):
        return getattr(self._tokenizer, name)


@pytest.mark.parametrize("bad_id", [-1, 2**63, 10**9])
def test_token_ids_outside_the_vocabulary_are_invalid_parameter(daemon, bad_id):
    peer = RawPeer(str(daemon.address))
    try:
        peer.send_map(_generate_map("bad", prompt_token_ids=[1, bad_id]))
        reply = peer.receive(timeout=10)
    finally:
        peer.close()
    assert isinstance(reply, ErrorReply)
    assert (reply.id, reply.code, reply.parameter) == (
        "bad",
        "invalid_parameter",
        "prompt_token_ids",
    )


def test_huge_prompt_is_refused_before_it_is_tokenized(daemon, monkeypatch):
    worker = daemon.text_worker
    gated = _GatedTokenizer(worker.tokenizer, gated_prompt="")
    monkeypatch.setattr(worker, "tokenizer", gated)
    prompt = "ab" * 50 * daemon.engine.max_model_len  # 100 characters per token at least
    with Client(str(daemon.address), timeout=30) as client:
        with pytest.raises(RequestRejectedError) as error:
            client.generate(prompt)
        assert error.value.parameter == "prompt"
        with pytest.raises(RequestRejectedError) as error:
            client.generate(messages=[{"role": "user", "content": prompt}])
        assert error.value.parameter == "messages"
    assert gated.encoded == []  # refused on its length alone


def test_a_slow_prompt_does_not_hold_up_other_requests(daemon, monkeypatch):
    worker = daemon.text_worker
    gated = _GatedTokenizer(worker.tokenizer, gated_prompt="slow to tokenize")
    monkeypatch.setattr(worker, "tokenizer", gated)
    timer = threading.Timer(20, gated.gate.set)  # without the pool the test ends, failing
    timer.start()
    slow = RawPeer(str(daemon.address))
    try:
        slow.send_map(_generate_map("slow", prompt="slow to tokenize", stream=False))
        with Client(str(daemon.address), timeout=30) as client:
            completion = client.generate("quick", params={"max_tokens": 2, "ignore_eos": True})
        was_blocked = not gated.gate.is_set()
        gated.gate.set()
        assert completion.finish_reason == "length"
        assert was_blocked, "the quick request waited for the slow prompt's tokenization"
        replies = [slow.receive(timeout=10) for _ in range(2)]
        assert [type(r).__name__ for r in replies] == ["Accepted", "Finished"]
    finally:
        timer.cancel()
        gated.gate.set()
        slow.close()


def test_the_client_checks_the_daemons_own_message_limit(daemon):
    outcome: dict[str, object] = {}

    def generate() -> None:
        with Client(str(daemon.address), timeout=2) as client:
            try:
                client.generate("x" * (2 * MAX_MESSAGE_BYTES))
            except Exception as error:
                outcome["error"] = error

    caller = threading.Thread(target=generate, daemon=True)
    caller.start()
    caller.join(20)
    assert not caller.is_alive(), "the client hangs on a request the daemon refused"
    error = outcome["error"]
    assert isinstance(error, InvalidParameterError) and error.parameter == "prompt"
    assert str(MAX_MESSAGE_BYTES) in error.message


def test_an_oversize_message_is_refused_under_its_own_id(daemon):
    peer = RawPeer(str(daemon.address))
    try:
        peer.send(pack(_generate_map("big", prompt="x" * (MAX_MESSAGE_BYTES + 10))))
        reply = peer.receive(timeout=10)
    finally:
        peer.close()
    assert isinstance(reply, ErrorReply)
    assert (reply.id, reply.code) == ("big", "protocol_error")


def test_a_max_model_len_refusal_carries_its_numbers_to_the_client_and_the_retry(daemon):
    max_model_len = daemon.engine.max_model_len
    prompt_ids = [5] * (max_model_len - 4)  # room for 4 tokens
    peer = RawPeer(str(daemon.address))
    try:  # on the wire: the numbers as fields of the `error`, whatever the message says
        peer.send_map(_generate_map("long", prompt_token_ids=prompt_ids,
                                    sampling_params={"max_tokens": 10}))  # fmt: skip
        reply = peer.receive(timeout=10)
    finally:
        peer.close()
    assert isinstance(reply, ErrorReply)
    assert (reply.code, reply.parameter, reply.num_prompt_tokens, reply.max_model_len,
            reply.max_fitting_tokens) == (
        "request_too_large", "max_tokens", max_model_len - 4, max_model_len, 4
    )  # fmt: skip
    with Client(str(daemon.address), timeout=30) as client:
        with pytest.raises(RequestRejectedError) as error:  # the client's typed error
            client.generate(prompt_token_ids=[5] * max_model_len)
        assert (error.value.parameter, error.value.num_prompt_tokens,
                error.value.max_model_len, error.value.max_fitting_tokens) == (
            "prompt", max_model_len, max_model_len, 0
        )  # fmt: skip
        cuts: list[MaxTokensCut] = []
        params = SamplingParams(max_tokens=10, ignore_eos=True)
        events = list(stream_fitted(client, params, cuts.append, prompt_token_ids=prompt_ids))
    assert cuts == [MaxTokensCut(max_model_len - 4, max_model_len, 10, 4)]
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.usage["completion_tokens"] == 4
