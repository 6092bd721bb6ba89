"""What every route shares: the daemon client, the served model's facts and the limits.

The client is opened lazily on the server's event loop (its sockets belong to that loop),
and the model's id and context length are read from the daemon once, on first use.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from llmd.client import AsyncClient
from llmd.http.errors import not_found
from llmd.tools.parser_choice import DEFAULT_PARSER


@dataclass(frozen=True)
class ServedModel:
    """The model the daemon serves, as /v1/models lists it."""

    id: str
    max_model_len: int
    created: int
    """Unix time the HTTP server first saw it."""
    tool_call_parser: str = DEFAULT_PARSER
    """The parser of free-form tool calls the daemon resolved (`--tool-call-parser`)."""
    quantization: str = ""
    """The checkpoint's weight quantization ("" for dense weights)."""
    weight_bytes: int = 0
    """Bytes of the loaded weights, quantized codes and scales included (0: the daemon
    predates the field)."""


class HttpContext:
    """Shared state of one HTTP server; the routes find it on `app.state.context`."""

    def __init__(self, daemon_address: str, api_key: str | None, max_body_bytes: int) -> None:
        self.daemon_address = daemon_address
        self.api_key = api_key
        self.max_body_bytes = max_body_bytes
        self._client: AsyncClient | None = None
        self._model: ServedModel | None = None

    @property
    def client(self) -> AsyncClient:
        """The AsyncClient all requests share (one ZeroMQ socket, many streams)."""
        if self._client is None:
            self._client = AsyncClient(self.daemon_address)
        return self._client

    async def close(self) -> None:
        """Abort what is still open and close the socket."""
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def served_model(self) -> ServedModel:
        """The served model (asked of the daemon the first time)."""
        if self._model is None:
            snapshot = await self.client.stats(include_requests=False, include_block_map=False)
            daemon = snapshot.daemon
            self._model = ServedModel(
                daemon.model,
                daemon.max_model_len,
                int(time.time()),
                daemon.tool_call_parser or DEFAULT_PARSER,
                daemon.quantization,
                daemon.weight_bytes,
            )
        return self._model

    async def check_model(self, requested: str | None) -> ServedModel:
        """The served model, or a 404 when the request names another one."""
        model = await self.served_model()
        if requested is not None and requested != model.id:
            raise not_found(
                f"the model {requested!r} does not exist; this server serves {model.id!r}",
                "model",
                "model_not_found",
            )
        return model
