"""The start-up warm-up: it covers every decode batch size of its wave and token-budget
prefill chunks, then leaves the engine exactly as a fresh one (same greedy output, no
cached prefix, every block free, counters at zero)."""

from __future__ import annotations

from llmd.config import EngineConfig
from llmd.llm_engine import LLMEngine
from llmd.sampling_params import SamplingParams
from llmd.warmup import MAX_WAVE, NUM_DECODE_STEPS, warm_up
from tests import scheduling_mode


def _engine(model_dir, **overrides) -> LLMEngine:
    kwargs = {"num_blocks": 512, "max_model_len": 256, "max_num_batched_tokens": 128}
    return LLMEngine(
        EngineConfig(
            model=str(model_dir), **{**kwargs, **scheduling_mode.engine_kwargs(), **overrides}
        )
    )


def _greedy(engine: LLMEngine, prompt: list[int]) -> list[int]:
    request = engine.add_request(prompt, SamplingParams(max_tokens=12, temperature=0.0))
    while engine.has_unfinished_requests():
        engine.step()
    return list(request.output_token_ids)


def test_warm_up_covers_the_shapes_and_leaves_the_engine_fresh(tiny_model_dir):
    engine = _engine(tiny_model_dir)
    seen = []
    report = warm_up(engine, on_step=seen.append)
    wave = report.num_requests - 1  # the long prompt, then the wave (halved to fit the pool)
    assert MAX_WAVE // 2 <= wave <= MAX_WAVE
    decode_batches = {stats.num_decode_seqs for stats in seen}
    groups = [wave - g * wave // NUM_DECODE_STEPS for g in range(NUM_DECODE_STEPS)]
    assert set(groups) <= decode_batches, (groups, decode_batches)  # wave, ..., wave / 8
    assert max(stats.num_prefill_tokens for stats in seen) == 128  # a full token budget
    assert report.num_prefill_tokens == sum(stats.num_prefill_tokens for stats in seen)
    assert not engine.has_unfinished_requests()
    usage = engine.block_manager.usage()
    assert (usage.num_used, usage.num_cached) == (0, 0)
    assert engine.block_manager.num_free_blocks == engine.runner.num_blocks
    assert engine.block_manager.num_prefix_query_tokens == 0
    assert engine.block_manager.num_prefix_hit_tokens == 0
    assert engine.scheduler.num_preemptions == 0
    assert engine.scheduler.requests == {}
    prompt = [3 + (k * 11) % 90 for k in range(40)]
    assert _greedy(engine, prompt) == _greedy(_engine(tiny_model_dir), prompt)


def test_warm_up_fits_a_small_pool_and_one_sequence(tiny_model_dir):
    engine = _engine(tiny_model_dir, num_blocks=64, max_num_seqs=1)
    report = warm_up(engine)
    assert report.num_steps > 0
    assert not engine.has_unfinished_requests()
    assert engine.block_manager.num_free_blocks == 64
