"""Sends one benchmark request to an OpenAI-compatible HTTP server and records its timings.

The same load can then be compared across llmd's ZeroMQ daemon, its HTTP API and other
servers; the request is a streamed /v1/completions call read as server-sent events. An
llmd server (its /version names a protocol version) is asked for each request's
`timings` (`return_timings`), which other servers might refuse.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from llmd.bench.datasets import Turn
from llmd.bench.driver import Driver
from llmd.bench.request_record import RequestRecord
from llmd.errors import InvalidParameterError
from llmd.wait_breakdown import WaitBreakdown

COMPLETIONS_PATH = "/v1/completions"
VERSION_PATH = "/version"
DONE_MARKER = "[DONE]"
BREAKDOWN_KEYS = tuple(WaitBreakdown().to_dict())
PHASES = ("queue", "prefill", "ttft", "decode", "tpot", "e2e")


class HttpDriver(Driver):
    """Streams requests to `base_url` + /v1/completions with httpx and fills RequestRecords."""

    def __init__(self, base_url: str, model: str | None = None, timeout_s: float = 600.0):
        try:
            import httpx
        except ModuleNotFoundError:
            raise InvalidParameterError(
                "--http needs httpx: pip install httpx (or 'llmd[http-bench]')", "http"
            ) from None
        if not base_url.startswith(("http://", "https://")):
            raise InvalidParameterError(f"--http must be an http(s) URL, got {base_url!r}", "http")
        self.root = base_url.rstrip("/").removesuffix("/v1")
        self.url = self.root + COMPLETIONS_PATH
        self.model = model
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0))
        super().__init__()
        self._is_llmd: asyncio.Task | None = None
        """Whether the server is llmd (asked once, shared by every request)."""

    async def _probe_llmd(self) -> bool:
        """True when GET /version answers like llmd (with a protocol version)."""
        try:
            response = await self.client.get(self.root + VERSION_PATH)
            return response.status_code == 200 and "protocol_version" in response.json()
        except Exception:  # any other server, or none: ask for nothing extra
            return False

    async def asks_timings(self) -> bool:
        """Whether requests ask for llmd's per-choice `timings`."""
        if self._is_llmd is None:
            self._is_llmd = asyncio.ensure_future(self._probe_llmd())
        return await self._is_llmd

    def _body(self, prompt_ids: list[int] | None, turn: Turn, asks_timings: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "prompt": prompt_ids if prompt_ids is not None else turn.prompt,
            "max_tokens": turn.max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.model:
            body["model"] = self.model
        if asks_timings:
            body["return_timings"] = True
        return body

    async def _stream(
        self, record: RequestRecord, prompt_ids: list[int] | None, turn: Turn, output_ids: list[int]
    ) -> None:
        """Stream one request; `output_ids` stay empty (HTTP gives text, not ids)."""
        num_chunks = 0
        body = self._body(prompt_ids, turn, await self.asks_timings())
        async with self.client.stream("POST", self.url, json=body) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")[:200]
                raise RuntimeError(f"HTTP {response.status_code}: {text}")
            async for line in response.aiter_lines():
                data = line.removeprefix("data:").strip() if line.startswith("data:") else ""
                if not data:
                    continue
                if data == DONE_MARKER:
                    break
                num_chunks += self._on_chunk(record, json.loads(data))
        if record.finish_reason is None:
            record.fail("the stream ended without a finish reason", self.now())
        else:
            record.end(self.now(), record.finish_reason)
        if not record.num_output_tokens:
            record.num_output_tokens = num_chunks  # no usage chunk: one token per chunk

    def _on_chunk(self, record: RequestRecord, chunk: dict[str, Any]) -> int:
        """Apply one SSE chunk; returns 1 when it carried output text."""
        usage = chunk.get("usage") or {}
        if usage:
            record.num_prompt_tokens = usage.get("prompt_tokens", record.num_prompt_tokens)
            record.num_output_tokens = usage.get("completion_tokens", record.num_output_tokens)
            details = usage.get("prompt_tokens_details") or {}
            record.num_cached_tokens = details.get("cached_tokens", 0) or 0
        carried = 0
        for choice in chunk.get("choices") or []:
            if choice.get("text"):
                record.note_output(self.now())
                carried = 1
            if choice.get("finish_reason"):
                record.finish_reason = choice["finish_reason"]
            timings = choice.get("timings")
            if isinstance(timings, dict):
                record.server_timings = {phase: timings.get(f"{phase}_s") for phase in PHASES}
                record.server_waits = {key: timings.get(key) for key in BREAKDOWN_KEYS}
        return carried

    async def close(self) -> None:
        """Close the HTTP connection pool."""
        await self.client.aclose()
