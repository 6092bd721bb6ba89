"""The Starlette application: routes, error handlers and authentication, wired together.

Every failure leaves in OpenAI's error shape (unknown routes too), and no exception,
however unexpected, stops the server: it becomes a 500 for that one request.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from llmd import __version__
from llmd.errors import LLMDError
from llmd.http import metrics_exporter, worker_routes
from llmd.http.auth import BearerAuth
from llmd.http.chat import create_chat_completion
from llmd.http.completions import create_completion
from llmd.http.context import HttpContext, ServedModel
from llmd.http.errors import HttpError, from_llmd_error, not_found
from llmd.http.request_id import RequestIdMiddleware
from llmd.http.tokenizer_routes import TOKENIZER_ROUTES
from llmd.protocol import PROTOCOL_VERSION

logger = logging.getLogger(__name__)


def create_app(context: HttpContext) -> Starlette:
    """The ASGI app serving `context`'s daemon."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await context.close()

    app = Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/version", version, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", get_model, methods=["GET"]),
            Route("/v1/completions", create_completion, methods=["POST"]),
            Route("/v1/chat/completions", create_chat_completion, methods=["POST"]),
            *TOKENIZER_ROUTES,
            *_worker_contract_routes(),
        ],
        middleware=[
            Middleware(RequestIdMiddleware),
            Middleware(BearerAuth, api_key=context.api_key),
        ],
        exception_handlers={
            HttpError: _on_http_error,
            LLMDError: _on_llmd_error,
            HTTPException: _on_starlette_error,
            Exception: _on_unexpected_error,
        },
        lifespan=lifespan,
    )
    app.state.context = context
    return app


def _worker_contract_routes() -> list[Route]:
    """The routes vllm-router's worker contract adds (GET or POST, as routers differ)."""
    both = ["GET", "POST"]
    return [
        Route("/get_server_info", worker_routes.get_server_info, methods=["GET"]),
        Route("/get_model_info", worker_routes.get_model_info, methods=["GET"]),
        Route("/load", worker_routes.load, methods=["GET"]),
        Route("/health_generate", worker_routes.health_generate, methods=["GET"]),
        Route("/flush_cache", worker_routes.flush_cache, methods=both),
    ]


async def health(request: Request) -> Response:
    """200 while the daemon serves; 503 while it drains, after its engine died, or if gone."""
    context: HttpContext = request.app.state.context
    try:
        reply = await context.client.health()
    except LLMDError as error:
        return JSONResponse({"status": "unreachable", "message": str(error)}, status_code=503)
    body = {"status": reply["status"], "message": reply.get("message")}
    return JSONResponse(body, status_code=200 if reply["is_healthy"] else 503)


async def version(request: Request) -> Response:
    """llmd's version and wire-protocol version."""
    return JSONResponse({"version": __version__, "protocol_version": PROTOCOL_VERSION})


async def metrics(request: Request) -> Response:
    """Prometheus text format, from one stats snapshot."""
    context: HttpContext = request.app.state.context
    snapshot = await context.client.stats(include_requests=False, include_block_map=False)
    return Response(metrics_exporter.render(snapshot), media_type=metrics_exporter.CONTENT_TYPE)


OWNED_BY = "vllm"
"""`owned_by` of the model card: SMG reads it to pick the worker's API dialect, and llmd
speaks vLLM's (its own identity is in /version)."""


def _model_card(model: ServedModel) -> dict[str, object]:
    """OpenAI's model object plus vLLM's `max_model_len` and llmd's weight facts.

    `quantization` (None for dense weights) and `weight_bytes` (None from a daemon that
    predates it) let a client see what the served weights cost without `llmd status`.
    """
    return {"id": model.id, "object": "model", "created": model.created, "owned_by": OWNED_BY,
            "max_model_len": model.max_model_len,
            "quantization": model.quantization or None,
            "weight_bytes": model.weight_bytes or None}  # fmt: skip


async def list_models(request: Request) -> Response:
    """The one served model."""
    model = await request.app.state.context.served_model()
    return JSONResponse({"object": "list", "data": [_model_card(model)]})


async def get_model(request: Request) -> Response:
    """The served model by id (404 for any other)."""
    model = await request.app.state.context.check_model(request.path_params["model"])
    return JSONResponse(_model_card(model))


async def _on_http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HttpError)  # registered for HttpError
    return error.response()


async def _on_llmd_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, LLMDError)  # registered for LLMDError
    return from_llmd_error(error).response()


async def _on_starlette_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)  # registered for HTTPException
    if error.status_code == 404:
        return not_found(f"no route {request.method} {request.url.path}").response()
    return HttpError(
        error.status_code, str(error.detail), None, code=str(error.status_code)
    ).response()


async def _on_unexpected_error(request: Request, error: Exception) -> Response:
    logger.exception("HTTP %s %s failed", request.method, request.url.path, exc_info=error)
    message = f"internal error: {type(error).__name__}: {error}"
    return HttpError(500, message, None, "internal_server_error", "internal").response()
