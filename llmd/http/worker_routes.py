"""The worker contract of vllm-router and SGLang-style gateways, answered with real figures.

`/get_server_info`, `/get_model_info` and `/load` read one stats snapshot, `/health_generate`
runs a one-token generation through the daemon, `/flush_cache` drops the engine's cached
prefixes: a router that calls them sees this daemon as it is, never a placeholder.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmd import __version__
from llmd.errors import LLMDError
from llmd.http.context import HttpContext
from llmd.protocol import PROTOCOL_VERSION, StatsSnapshot

HEALTH_PROMPT_TOKEN_IDS = [1]
"""The one-token prompt `/health_generate` sends (any id in the vocabulary would do)."""


async def _snapshot(request: Request) -> StatsSnapshot:
    context: HttpContext = request.app.state.context
    return await context.client.stats(include_requests=False, include_block_map=False)


async def get_server_info(request: Request) -> Response:
    """The daemon's configuration: model, limits, KV pool, device, versions."""
    snapshot = await _snapshot(request)
    daemon = snapshot.daemon
    return JSONResponse(
        {
            "model_path": daemon.model,
            "served_model_name": daemon.model,
            "max_model_len": daemon.max_model_len,
            "max_num_seqs": daemon.max_num_seqs,
            "max_num_batched_tokens": daemon.max_num_batched_tokens,
            "block_size": daemon.block_size,
            "num_gpu_blocks": daemon.num_blocks,
            "max_total_num_tokens": daemon.num_blocks * daemon.block_size,
            "device": daemon.device,
            "device_name": daemon.device_name,
            "dtype": daemon.dtype,
            "attention_backend": daemon.attention_backend,
            "scheduling_policy": daemon.scheduling_policy,
            "async_scheduling": daemon.async_scheduling,
            "state": daemon.state,
            "version": __version__,
            "protocol_version": PROTOCOL_VERSION,
        }
    )


async def get_model_info(request: Request) -> Response:
    """The served model as SGLang's gateway asks for it."""
    snapshot = await _snapshot(request)
    daemon = snapshot.daemon
    return JSONResponse(
        {
            "model_path": daemon.model,
            "tokenizer_path": daemon.model,
            "is_generation": True,
            "max_model_len": daemon.max_model_len,
            "vocab_size": daemon.vocab_size,
            "num_params": daemon.num_params,
        }
    )


async def load(request: Request) -> Response:
    """The daemon's load now: running, waiting, KV use (503 once the engine died)."""
    snapshot = await _snapshot(request)
    if snapshot.queue is None or snapshot.kv is None:
        body = {"status": snapshot.daemon.state, "message": snapshot.daemon.error}
        return JSONResponse(body, status_code=503)
    queue, kv = snapshot.queue, snapshot.kv
    return JSONResponse(
        {
            "num_requests_running": queue.running,
            "num_requests_waiting": queue.waiting,
            "num_requests": queue.running + queue.waiting,
            "kv_cache_usage_perc": kv.usage,
            "num_kv_blocks_used": kv.num_used,
            "num_kv_blocks_total": kv.num_total,
            "num_in_flight": snapshot.daemon.num_in_flight,
        }
    )


async def health_generate(request: Request) -> Response:
    """200 once a one-token generation went through the engine; 503 with why otherwise."""
    context: HttpContext = request.app.state.context
    try:
        completion = await context.client.generate(
            prompt_token_ids=HEALTH_PROMPT_TOKEN_IDS,
            params={"max_tokens": 1, "ignore_eos": True},
            label=request.state.request_label,
        )
    except LLMDError as error:
        body = {"status": "unhealthy", "code": error.code, "message": str(error)}
        return JSONResponse(body, status_code=503)
    return JSONResponse({"status": "ok", "num_generated_tokens": len(completion.token_ids)})


async def flush_cache(request: Request) -> Response:
    """Drop every cached prefix; 409 (`cache_busy`) while requests run or wait."""
    context: HttpContext = request.app.state.context
    num_blocks_dropped = await context.client.flush_cache()
    return JSONResponse({"status": "ok", "num_blocks_dropped": num_blocks_dropped})
