"""Quantized checkpoints against their source in one benchmark run (`bench offline --quantized`).

A decode step reads every weight once, so fewer weight bytes should mean faster decode:
each checkpoint gets the same workload's output tok/s, its weight bytes, and a batch-1
decode step next to the time its weights take to stream at the measured copy bandwidth.
Rounds alternate the checkpoints, and ratios are paired within a round, because on a shared
machine the load drifts between runs more than one checkpoint differs from another.
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
    num_rounds: int = 1,
) -> list[dict]:
    """One row per checkpoint (the source first): tok/s, speed-up, bytes, decode step.

    Each round runs every checkpoint once, in turn, so drift in the machine's load reaches
    all of them alike; a speed-up is the median of the rounds' paired ratios to the source.
    """
    paths = [source, *quantized]
    rounds: list[list[dict]] = []
    for round_index in range(max(1, num_rounds)):
        runs = []
        for path in paths:
            tok_s = run_workload(path)
            step_ms, facts = decode_step_ms(path, engine_options)
            runs.append({**facts, "tok_s": tok_s, "decode_step_ms": step_ms})
            print(f"round {round_index + 1}: {path.name} {tok_s:.1f} output tok/s, "
                  f"decode step {step_ms:.2f} ms", flush=True)  # fmt: skip
        rounds.append(runs)
    source_runs = [runs[0] for runs in rounds]
    rows = []
    for index, path in enumerate(paths):
        rows.append(summarize(path, [runs[index] for runs in rounds], source_runs, copy_gbps))
        print(format_row(rows[-1]), flush=True)
    return rows


def summarize(
    path: Path, runs: list[dict], source_runs: list[dict], copy_gbps: float | None
) -> dict:
    """A checkpoint's row from its runs, one per round, paired with the source's runs."""
    row = {
        "checkpoint": str(path),
        "quantization": runs[0]["quantization"],
        "weight_bytes": runs[0]["weight_bytes"],
        "tok_s": statistics.median(run["tok_s"] for run in runs),
        "decode_step_ms": statistics.median(run["decode_step_ms"] for run in runs),
        "speedup": statistics.median(
            run["tok_s"] / base["tok_s"] for run, base in zip(runs, source_runs, strict=True)
        ),
        "decode_speedup": statistics.median(
            base["decode_step_ms"] / run["decode_step_ms"]
            for run, base in zip(runs, source_runs, strict=True)
        ),
        "rounds": [
            {"tok_s": run["tok_s"], "decode_step_ms": run["decode_step_ms"]} for run in runs
        ],
    }
    if copy_gbps:
        row["weights_at_copy_ms"] = row["weight_bytes"] / (copy_gbps * 1e9) * 1e3
    return row


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
