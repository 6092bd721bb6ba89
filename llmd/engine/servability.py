"""Whether a request could ever run on this engine: a prompt, and room in max_model_len and KV.

Checked once when a request is added, so what the scheduler accepts it can always admit
eventually; max_tokens is never silently shortened.
"""

from __future__ import annotations

from llmd.engine.block_manager import BlockManager
from llmd.engine.request import Request
from llmd.errors import InvalidParameterError, RequestRejectedError


def check_servable(request: Request, max_len: int, block_manager: BlockManager) -> None:
    """Raise RequestRejectedError if the request could never run on this engine."""
    if request.num_prompt_tokens == 0:
        raise InvalidParameterError("prompt is empty", "prompt")
    num_prompt_tokens = request.num_prompt_tokens
    context = {
        "num_prompt_tokens": num_prompt_tokens,
        "max_model_len": max_len,
        "max_fitting_tokens": max(0, max_len - num_prompt_tokens),
    }
    if num_prompt_tokens >= max_len:
        raise RequestRejectedError(
            f"prompt has {num_prompt_tokens} tokens, but max_model_len is "
            f"{max_len} (prompt plus at least one output token must fit)",
            "prompt",
            **context,
        )
    num_tokens = request.max_num_tokens
    if num_tokens > max_len:
        raise RequestRejectedError(
            f"prompt ({num_prompt_tokens} tokens) plus max_tokens "
            f"({request.sampling_params.max_tokens}) is {num_tokens} tokens, but "
            f"max_model_len is {max_len}",
            "max_tokens",
            **context,
        )
    num_blocks = block_manager.num_blocks_for(num_tokens)
    if num_blocks > block_manager.num_blocks:
        raise RequestRejectedError(
            f"prompt plus max_tokens needs {num_tokens} tokens = {num_blocks} KV blocks, "
            f"but the whole KV cache has {block_manager.num_blocks} blocks",
            "max_tokens",
        )


def resolve_max_model_len(configured: int | None, model_max: int) -> int:
    """The configured context length, bounded by the model's positions (and sliding window)."""
    if configured is None:
        return model_max
    if configured > model_max:
        raise InvalidParameterError(
            f"{configured} exceeds the model's maximum of {model_max}", "max_model_len"
        )
    return configured
