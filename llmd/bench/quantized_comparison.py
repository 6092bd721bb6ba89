"""Quantized checkpoints against their source in one benchmark run (`bench offline --quantized`).

A decode step reads every weight once, so fewer weight bytes should mean faster decode:
each checkpoint gets the same workload's output tok/s, its weight bytes, and a batch-1
decode step next to the time its weights take to stream at the measured copy bandwidth.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

DECODE_PROMPT_LEN = 32
DECODE_STEPS = 64
"""A batch-1 decode of this many tokens (after a 32-token prompt) times the decode step."""


def decode_step_ms(path: Path, engine_options: dict) -> tuple[float, dict]:
    """Median ms of one batch-1 decode step of `path`, and the engine's weight facts."""
    from llmd.config import EngineConfig
    from llmd.llm_engine import LLMEngine
    from llmd.sampling_params import SamplingParams

    engine = LLMEngine(EngineConfig(model=str(path), skip_tokenizer_init=True, **engine_options))
    params = SamplingParams(temperature=0.0, max_tokens=DECODE_STEPS, ignore_eos=True)
    engine.add_request(list(range(1, DECODE_PROMPT_LEN + 1)), params)
    engine.step()  # the prefill
    step_ms = []
    while engine.has_unfinished_requests():
        start = time.perf_counter()
        engine.step()
        step_ms.append((time.perf_counter() - start) * 1e3)
    facts = engine.facts()
    return statistics.median(step_ms), {
        "quantization": facts.quantization or "dense",
        "weight_bytes": facts.weight_bytes,
    }


def compare_quantized(
    source: Path,
    quantized: list[Path],
    run_workload: Callable[[Path], float],
    engine_options: dict,
    copy_gbps: float | None,
) -> list[dict]:
    """One row per checkpoint (the source first): tok/s, speed-up, bytes, decode step."""
    rows = []
    for path in [source, *quantized]:
        tok_s = run_workload(path)
        step_ms, facts = decode_step_ms(path, engine_options)
        row = {"checkpoint": str(path), **facts, "tok_s": tok_s, "decode_step_ms": step_ms}
        if copy_gbps:
            row["weights_at_copy_ms"] = facts["weight_bytes"] / (copy_gbps * 1e9) * 1e3
        row["speedup"] = tok_s / rows[0]["tok_s"] if rows else 1.0
        row["decode_speedup"] = rows[0]["decode_step_ms"] / step_ms if rows else 1.0
        rows.append(row)
        print(format_row(row), flush=True)
    return rows


def format_row(row: dict) -> str:
    """One checkpoint's line of the comparison."""
    at_copy = row.get("weights_at_copy_ms")
    bound = "" if at_copy is None else f" (weights at copy bandwidth {at_copy:.2f} ms)"
    return (
        f"{Path(row['checkpoint']).name}: {row['quantization']}, "
        f"{row['weight_bytes'] / 1e6:.1f} MB; {row['tok_s']:.1f} output tok/s "
        f"({row['speedup']:.2f}x); decode step {row['decode_step_ms']:.2f} ms "
        f"({row['decode_speedup']:.2f}x){bound}"
    )
