"""The engine's static facts (model, device, limits, KV pool) as the snapshot carries them.

`llmd status`, top's header and the daemon's roofline figures read them; gathered here
from the engine's config, model shape, scheduler and runner in one place, so the engine
module keeps to its step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmd.engine.engine_snapshot import EngineFacts
from llmd.runner.device import dtype_name

if TYPE_CHECKING:
    from llmd.llm_engine import LLMEngine


def engine_facts(engine: LLMEngine) -> EngineFacts:
    """What does not change while `engine` serves."""
    shape, runner = engine.shape, engine.runner
    return EngineFacts(
        model=engine.model_name,
        device=engine.device,
        dtype=engine.dtype,
        device_name=engine.device_name,
        max_model_len=engine.max_model_len,
        num_params=shape.num_params,
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        num_layers=shape.num_layers,
        num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,
        is_tied=shape.tie_word_embeddings,
        scheduling_policy=engine.config.scheduling_policy,
        max_num_batched_tokens=engine.scheduler.config.max_num_batched_tokens,
        max_num_seqs=engine.config.max_num_seqs,
        block_size=engine.config.block_size,
        num_blocks=runner.num_blocks,
        attention_backend=runner.backend.name,
        async_scheduling=engine.async_scheduling,
        kv_cache_dtype=dtype_name(runner.kv_dtype),
        num_experts=shape.num_experts,
        num_experts_per_token=shape.num_experts_per_token,
        num_moe_layers=shape.num_moe_layers,
        num_params_per_expert=shape.num_params_per_expert,
        quantization=runner.quantization,
        weight_bytes=runner.weight_bytes,
    )
