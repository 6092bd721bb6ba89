"""A stand-in for the daemon behind the HTTP app: every request "generates" a scripted text.

Lets the HTTP layer's tool parsing be tested on the replies a real model family writes
(a random-weight model would never write a call), through the real routes and SDK.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from llmd.client import Completion
from llmd.http.context import HttpContext, ServedModel
from llmd.protocol import Accepted, Finished, TokenDelta

MODEL_ID = "fake-model"


class FakeDaemonClient:
    """Answers generate and stream with `text`, streamed in `pieces`; records each request."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces
        self.requests: list[dict[str, Any]] = []

    async def generate(self, prompt: str | None, **options: Any) -> Completion:
        self.requests.append(options)
        text = "".join(self.pieces)
        usage = {"prompt_tokens": 3, "completion_tokens": len(self.pieces), "cached_tokens": 0}
        return Completion("c-1", "r-1", text, [], "stop", None, 3, usage, {})

    async def stream(self, prompt: str | None, **options: Any) -> AsyncIterator[object]:
        self.requests.append(options)
        yield Accepted("c-1", "r-1", 3)
        for piece in self.pieces:
            yield TokenDelta("c-1", piece, [1])
        usage = {"prompt_tokens": 3, "completion_tokens": len(self.pieces), "cached_tokens": 0}
        yield Finished("c-1", "stop", None, [1] * len(self.pieces), usage, {})

    async def close(self) -> None:
        pass


class FakeContext(HttpContext):
    """An HttpContext whose daemon is a FakeDaemonClient serving `parser_name`'s family."""

    def __init__(self, client: FakeDaemonClient, parser_name: str = "hermes") -> None:
        super().__init__("ipc:///nonexistent", None, 1 << 20)
        self.fake_client = client
        self.model = ServedModel(MODEL_ID, 512, 0, parser_name)

    @property
    def client(self) -> Any:
        return self.fake_client

    async def served_model(self) -> ServedModel:
        return self.model
