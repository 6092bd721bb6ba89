#!/usr/bin/env python
"""One system's side of scripts/bench_offline_vs_vllm.py: times `LLM.generate` on a workload.

Run by that script, once per system and dtype, with the system's own interpreter (vllm's
venv or the project's .venv), so that vllm and llmd never share a process or a torch:

    python scripts/offline_peer_worker.py JOB.json RESULT.json

JOB.json names the system, the workload file, the checkpoint and the engine settings. The
worker builds the system's `LLM` once, runs one untimed warm-up generate on the workload's
warm-up requests, then times `generate()` alone over every request --repeats times, and
writes each run's seconds and output tokens plus the last run's output token ids. Standard
library only at import: vllm or llmd is imported for the system asked for.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

Generate = Callable[[list["PeerRequest"]], list[list[int]]]


@dataclass(frozen=True)
class PeerRequest:
    """One request of the workload: its prompt as token ids and its output length."""

    prompt_token_ids: list[int]
    max_tokens: int


@dataclass(frozen=True)
class PeerWorkload:
    """The timed requests, the warm-up requests and how they were made (seed, lengths)."""

    requests: list[PeerRequest]
    warmup: list[PeerRequest]
    meta: dict


def write_workload(path: Path, workload: PeerWorkload) -> None:
    """Write a workload as JSON, so that both systems read the very same token ids."""
    def rows(requests: list[PeerRequest]) -> list[dict]:
        return [{"prompt_token_ids": r.prompt_token_ids, "max_tokens": r.max_tokens}
                for r in requests]

    document = {**workload.meta, "requests": rows(workload.requests),
                "warmup": rows(workload.warmup)}
    path.write_text(json.dumps(document) + "\n")


def read_workload(path: Path) -> PeerWorkload:
    """Read a workload written by write_workload; a malformed file raises ValueError."""
    document = json.loads(path.read_text())

    def requests(key: str) -> list[PeerRequest]:
        try:
            return [PeerRequest([int(t) for t in row["prompt_token_ids"]], int(row["max_tokens"]))
                    for row in document[key]]
        except (KeyError, TypeError) as error:
            raise ValueError(f"{path}: no valid {key!r} requests ({error})") from None

    meta = {k: v for k, v in document.items() if k not in ("requests", "warmup")}
    return PeerWorkload(requests("requests"), requests("warmup"), meta)


def shared_engine_options(job: dict) -> dict[str, object]:
    """The engine options both systems' `LLM` take under the same names, from the job."""
    return {
        "dtype": job["dtype"],
        "seed": job["seed"],
        "max_model_len": job["max_model_len"],
        "max_num_seqs": job["max_num_seqs"],
        "max_num_batched_tokens": job["max_num_batched_tokens"],
        "enable_prefix_caching": job["prefix_caching"],
        "enforce_eager": job["enforce_eager"],
        "skip_tokenizer_init": True,
    }


def vllm_generate(job: dict) -> tuple[Generate, str]:
    """vllm's `LLM` on the job's settings, and a generate over token-id prompts."""
    import vllm

    llm = vllm.LLM(model=job["model"], **shared_engine_options(job))

    def generate(requests: list[PeerRequest]) -> list[list[int]]:
        prompts = [{"prompt_token_ids": r.prompt_token_ids} for r in requests]
        params = [vllm.SamplingParams(max_tokens=r.max_tokens, temperature=0.0,
                                      ignore_eos=True, detokenize=False) for r in requests]
        outputs = llm.generate(prompts, params, use_tqdm=False)
        return [list(output.outputs[0].token_ids) for output in outputs]

    return generate, vllm.__version__


def llmd_generate(job: dict) -> tuple[Generate, str]:
    """llmd's `LLM` on the job's settings, and a generate over token-id prompts."""
    import llmd
    from llmd.llm import LLM
    from llmd.sampling_params import SamplingParams

    llm = LLM(
        job["model"], device="cpu", kv_cache_memory_gib=job["kv_cache_gib"],
        num_threads=job["threads"], **shared_engine_options(job),
    )  # fmt: skip

    def generate(requests: list[PeerRequest]) -> list[list[int]]:
        params = [SamplingParams(temperature=0.0, max_tokens=r.max_tokens, ignore_eos=True)
                  for r in requests]
        outputs = llm.generate([r.prompt_token_ids for r in requests], params)
        return [list(output.token_ids) for output in outputs]

    return generate, getattr(llmd, "__version__", "checkout")


def main(argv: list[str] | None = None) -> int:
    """Run the job named by argv[0] and write its result to argv[1]."""
    job_path, result_path = (argv if argv is not None else sys.argv[1:])[:2]
    job = json.loads(Path(job_path).read_text())
    workload = read_workload(Path(job["workload"]))
    started = time.perf_counter()
    generate, version = (vllm_generate if job["system"] == "vllm" else llmd_generate)(job)
    result: dict = {"system": job["system"], "dtype": job["dtype"], "version": version,
                    "init_s": time.perf_counter() - started, "pid": os.getpid()}
    warmup = workload.warmup[: job["warmup_requests"]]
    if warmup:
        started = time.perf_counter()
        generate(warmup)
        result["warmup_s"] = time.perf_counter() - started
    runs, outputs = [], []
    for repeat in range(job["repeats"]):
        load_before = os.getloadavg()
        started = time.perf_counter()
        outputs = generate(workload.requests)
        seconds = time.perf_counter() - started
        tokens = sum(map(len, outputs))
        runs.append({"seconds": seconds, "output_tokens": tokens, "tok_s": tokens / seconds,
                     "loadavg_before": load_before})
        print(f"{job['system']} {job['dtype']} run {repeat + 1}/{job['repeats']}: "
              f"{tokens / seconds:.1f} output tok/s ({seconds:.2f} s)", flush=True)
    result |= {"runs": runs, "median_tok_s": statistics.median(r["tok_s"] for r in runs),
               "outputs": outputs}
    Path(result_path).write_text(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
