"""The one max_tokens retry that `llmd generate`, `llmd chat -p` and the chat share."""

from __future__ import annotations

import contextlib

import pytest

from llmd.client.context_fit import MaxTokensCut
from llmd.client.fitted_stream import astream_fitted, stream_fitted
from llmd.errors import RequestRejectedError
from llmd.protocol import Accepted, Finished, TokenDelta
from llmd.sampling_params import SamplingParams


def refusal(num_prompt_tokens: int, max_model_len: int) -> RequestRejectedError:
    return RequestRejectedError(
        "words no client reads",
        "max_tokens",
        num_prompt_tokens=num_prompt_tokens,
        max_model_len=max_model_len,
        max_fitting_tokens=max_model_len - num_prompt_tokens,
    )


class ScriptedStreams:
    """A client whose n-th stream yields the n-th script: events, then maybe an error."""

    def __init__(self, *scripts: tuple[list, Exception | None]) -> None:
        self.scripts = list(scripts)
        self.max_tokens: list[int] = []
        """The max_tokens of every stream opened, in order."""
        self.num_closed = 0

    def _events(self, params: SamplingParams):
        self.max_tokens.append(params.max_tokens)
        events, error = self.scripts.pop(0)
        try:
            yield from events
            if error is not None:
                raise error
        finally:
            self.num_closed += 1

    def stream(self, *, params: SamplingParams, prompt: str):
        return self._events(params)


class AsyncScriptedStreams(ScriptedStreams):
    async def _aevents(self, params: SamplingParams):
        for event in self._events(params):
            yield event

    def stream(self, *, params: SamplingParams, prompt: str):
        return self._aevents(params)


ACCEPTED = Accepted("c-1", "req-1", 7)
DELTA = TokenDelta("c-1", "hi", [5])
FINISHED = Finished("c-1", "length", None, [5], {}, {})
PARAMS = SamplingParams(max_tokens=1000)


def test_a_refused_max_tokens_is_sent_again_once_for_what_fits():
    client = ScriptedStreams(([], refusal(7, 512)), ([ACCEPTED, DELTA, FINISHED], None))
    cuts: list[MaxTokensCut] = []
    events = list(stream_fitted(client, PARAMS, cuts.append, prompt="q"))
    assert events == [ACCEPTED, DELTA, FINISHED]
    assert client.max_tokens == [1000, 505]
    assert cuts == [MaxTokensCut(7, 512, 1000, 505)]
    assert cuts[0].warning() == (
        "warning: --max-tokens 1000 does not fit: the prompt has 7 tokens and the context "
        "512, so at most 505 tokens will be generated"
    )
    assert client.num_closed == 2


def test_a_refusal_after_accepted_is_retried_but_never_after_text_or_twice():
    late = ScriptedStreams(([ACCEPTED], refusal(7, 512)), ([ACCEPTED, FINISHED], None))
    assert list(stream_fitted(late, PARAMS, lambda cut: None, prompt="q"))[-1] == FINISHED
    assert late.max_tokens == [1000, 505]
    after_text = ScriptedStreams(([ACCEPTED, DELTA], refusal(7, 512)))
    with pytest.raises(RequestRejectedError):
        list(stream_fitted(after_text, PARAMS, lambda cut: None, prompt="q"))
    twice = ScriptedStreams(([], refusal(7, 512)), ([], refusal(400, 512)))
    with pytest.raises(RequestRejectedError) as error:
        list(stream_fitted(twice, PARAMS, lambda cut: None, prompt="q"))
    assert error.value.num_prompt_tokens == 400 and twice.max_tokens == [1000, 505]


def test_a_refusal_without_numbers_or_room_is_raised_as_it_came():
    for error in (RequestRejectedError("KV pool too small", "max_tokens"), refusal(512, 512)):
        client = ScriptedStreams(([], error))
        cuts: list[MaxTokensCut] = []
        with pytest.raises(RequestRejectedError) as raised:
            list(stream_fitted(client, PARAMS, cuts.append, prompt="q"))
        assert raised.value is error and cuts == [] and client.max_tokens == [1000]


def test_closing_the_fitted_stream_closes_the_stream_under_it():
    client = ScriptedStreams(([ACCEPTED, DELTA, FINISHED], None))
    stream = stream_fitted(client, PARAMS, lambda cut: None, prompt="q")
    assert next(stream) == ACCEPTED
    stream.close()
    assert client.num_closed == 1


async def test_the_async_stream_retries_the_same_way():
    client = AsyncScriptedStreams(([ACCEPTED], refusal(7, 512)), ([ACCEPTED, FINISHED], None))
    cuts: list[MaxTokensCut] = []
    async with contextlib.aclosing(astream_fitted(client, PARAMS, cuts.append, prompt="q")) as s:
        events = [event async for event in s]
    assert events == [ACCEPTED, ACCEPTED, FINISHED]
    assert client.max_tokens == [1000, 505] and cuts == [MaxTokensCut(7, 512, 1000, 505)]
