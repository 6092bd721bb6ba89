"""Streams that ask once more, for what fits, when the daemon refuses max_tokens for the context.

`llmd generate`, `llmd chat -p` and the chat all send a max_tokens the user chose without
knowing how many tokens the prompt has; the daemon's refusal says how many fit, so this
one retry serves all three (each only says the cut in its own words, through `on_cut`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncGenerator, Callable, Generator
from typing import TYPE_CHECKING

from llmd.client.completion import StreamEvent
from llmd.client.context_fit import MaxTokensCut, max_tokens_cut
from llmd.client.request_options import PromptOptions
from llmd.errors import RequestRejectedError
from llmd.protocol import TokenDelta
from llmd.sampling_params import SamplingParams

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is Python 3.11+

    from llmd.client.async_client import AsyncClient
    from llmd.client.sync_client import Client


class StreamRequest(PromptOptions, total=False):
    """The keywords of `Client.stream` besides `params`, passed through as given."""

    prompt: str | None


class FitRetry:
    """The retry's state: the params to send, whether text arrived, whether it retried."""

    def __init__(self, params: SamplingParams, on_cut: Callable[[MaxTokensCut], None]) -> None:
        self.params = params
        """What the next attempt sends."""
        self.on_cut = on_cut
        """Told the cut before the retry is sent (to warn the user)."""
        self.has_text = False
        """A token arrived: the reply is under way and is never sent again."""
        self.is_retried = False

    def saw(self, event: StreamEvent) -> None:
        """An event of the current attempt reached the caller."""
        self.has_text = self.has_text or isinstance(event, TokenDelta)

    def retry_or_raise(self, error: RequestRejectedError) -> None:
        """Prepare the one retry `error` allows, or re-raise it."""
        cut = max_tokens_cut(error, self.params.max_tokens)
        if cut is None or self.has_text or self.is_retried:
            raise error
        self.on_cut(cut)
        self.params = dataclasses.replace(self.params, max_tokens=cut.max_tokens)
        self.is_retried = True


def stream_fitted(
    client: Client,
    params: SamplingParams,
    on_cut: Callable[[MaxTokensCut], None],
    **request: Unpack[StreamRequest],
) -> Generator[StreamEvent, None, None]:
    """`client.stream(params=params, **request)`, sent again once with the max_tokens that
    fits if the daemon refuses it for the context; closing it closes the stream."""
    retry = FitRetry(params, on_cut)
    while True:
        with contextlib.closing(client.stream(params=retry.params, **request)) as events:
            try:
                for event in events:
                    retry.saw(event)
                    yield event
                return
            except RequestRejectedError as error:
                retry.retry_or_raise(error)


async def astream_fitted(
    client: AsyncClient,
    params: SamplingParams,
    on_cut: Callable[[MaxTokensCut], None],
    **request: Unpack[StreamRequest],
) -> AsyncGenerator[StreamEvent, None]:
    """The same for an AsyncClient: `stream_fitted` with async iteration."""
    retry = FitRetry(params, on_cut)
    while True:
        async with contextlib.aclosing(client.stream(params=retry.params, **request)) as events:
            try:
                async for event in events:
                    retry.saw(event)
                    yield event
                return
            except RequestRejectedError as error:
                retry.retry_or_raise(error)
