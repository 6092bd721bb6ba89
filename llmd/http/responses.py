"""Pieces both generation routes share: usage, finish reasons, disconnect-aware waiting.

A non-streaming client that hangs up is noticed while its request still runs, and the
request is aborted on the daemon like a streaming one, so no KV is held for nobody.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from llmd.client import Completion
from llmd.errors import LLMDError, ShuttingDownError
from llmd.http import sse
from llmd.http.errors import HttpError, from_llmd_error
from llmd.http.generation_group import GenerationGroup

logger = logging.getLogger(__name__)

CLIENT_CLOSED_STATUS = 499
"""Logged for a request whose client left before the answer (nobody reads it)."""


def new_id(prefix: str) -> str:
    """A response id such as `cmpl-3f2a...`."""
    return f"{prefix}-{uuid.uuid4().hex}"


def now_s() -> int:
    """`created`: Unix seconds."""
    return int(time.time())


def usage(entries: Iterable[dict[str, int]], num_choices: int = 1) -> dict[str, object]:
    """OpenAI usage over the requests' daemon usage maps, in choice order.

    Completion tokens are summed over every choice; a prompt (and its cached part) is
    counted once for its `num_choices` choices, as OpenAI bills n > 1.
    """
    entries = list(entries)
    prompts = entries[::num_choices]
    prompt = sum(entry.get("prompt_tokens", 0) for entry in prompts)
    completion = sum(entry.get("completion_tokens", 0) for entry in entries)
    cached = sum(entry.get("cached_tokens", 0) for entry in prompts)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def finish_reason(reason: str) -> str:
    """`stop` or `length`; a request the daemon aborted (shutdown) is an error instead."""
    if reason in ("stop", "length"):
        return reason
    raise ShuttingDownError("the daemon aborted this request (it is shutting down)")


async def complete(request: Request, group: GenerationGroup) -> list[Completion] | None:
    """Run every prompt to the end; None (after aborting them) if the client hung up."""
    group.start()
    work = asyncio.ensure_future(group.completions())
    hang_up = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait({work, hang_up}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        work.cancel()
        group.cancel()
        raise
    finally:
        hang_up.cancel()
    if not work.done():  # the client hung up first
        work.cancel()
        group.cancel()
        return None
    if work.exception() is not None:  # one prompt failed: the others' work is wasted
        group.cancel()
    return work.result()


def client_gone() -> Response:
    """What a request whose client left returns (it is never read)."""
    return Response(status_code=CLIENT_CLOSED_STATUS)


async def start_stream(
    group: GenerationGroup, chunks: Callable[[], AsyncIterator[bytes]]
) -> StreamingResponse:
    """Send the prompts; once the daemon accepted all of them, stream `chunks()` as SSE.

    A refusal before acceptance raises (and so gets its HTTP status); a failure after the
    stream began, a bug included, goes out as an error event followed by [DONE].
    """
    group.start()
    try:
        await group.wait_accepted()
    except BaseException:
        group.cancel()
        raise

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in chunks():
                yield chunk
        except LLMDError as error:
            yield sse.event(from_llmd_error(error).body())
        except Exception as error:  # a bug too ends the stream the way OpenAI's clients expect
            logger.exception("a streamed response failed")
            message = f"internal error: {type(error).__name__}: {error}"
            internal = HttpError(500, message, None, "internal_server_error", "internal")
            yield sse.event(internal.body())
        yield sse.DONE

    return GroupStreamingResponse(group, body())


class GroupStreamingResponse(StreamingResponse):
    """An SSE response that aborts its prompts however it ends (done, error, disconnect).

    A disconnect may cancel the response while the body generator is parked at a `yield`;
    its `finally` would then run only when the generator is garbage-collected, so the
    abort is sent here, in the request's own task, instead.
    """

    def __init__(self, group: GenerationGroup, body: AsyncIterator[bytes]) -> None:
        super().__init__(body, media_type=sse.MEDIA_TYPE, headers=sse.HEADERS)
        self.group = group

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.group.cancel()  # no-op once every prompt ended


async def _wait_for_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
