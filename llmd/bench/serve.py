"""`llmd bench serve`: build the dataset, play it against a daemon, summarize the run.

One function from options to result dict, shared by the command and by the sweep, so
a sweep point is exactly what a user would get running `bench serve` by hand.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llmd.bench.arrivals import arrival_offsets
from llmd.bench.capacity import Capacity, CapacityOptions, Probe, find_capacity, rate_text
from llmd.bench.datasets import (
    FIRST_TOKEN_ID,
    Session,
    multi_turn_sessions,
    random_sessions,
    repeat_sessions,
    shared_prefix_sessions,
    sharegpt_sessions,
)
from llmd.bench.driver import Driver
from llmd.bench.load_generator import LoadGenerator
from llmd.bench.progress import Progress
from llmd.bench.report import build_result
from llmd.bench.slo import Slo
from llmd.errors import InvalidParameterError
from llmd.protocol.stats_snapshot import StatsSnapshot

NUM_WARMUP_REQUESTS = 2
WARMUP_SEED_OFFSET = 1_000_003
"""Warm-up prompts come from a seed no measured run uses."""


@dataclass(frozen=True)
class ServeOptions:
    """Everything one `bench serve` run needs; field docs are the command's --help."""

    address: str | None = None
    http_url: str | None = None
    """Drive an OpenAI-compatible HTTP server at this URL instead of the ZeroMQ daemon."""
    served_model: str | None = None
    """The `model` field of HTTP requests."""
    dataset: str = "random"
    num_prompts: int = 100
    """Requests (single-turn datasets) or sessions (multi-turn)."""
    input_len: int = 128
    output_len: int = 64
    range_ratio: float = 0.0
    num_groups: int = 4
    prefix_len: int = 256
    num_turns: int = 3
    dataset_path: str | None = None
    tokenizer: str | None = None
    request_rate: float = math.inf
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0
    slo: str | None = None
    vocab_size: int | None = None
    show_progress: bool = True


def _known_vocab_size(options: ServeOptions, stats: StatsSnapshot | None) -> int | None:
    """--vocab-size, else the daemon's; None from a server without llmd's stats."""
    return options.vocab_size or (None if stats is None else stats.daemon.vocab_size)


def _vocab_size(options: ServeOptions, stats: StatsSnapshot | None) -> int:
    vocab_size = _known_vocab_size(options, stats)
    if not vocab_size:
        raise InvalidParameterError(
            "the daemon does not report its vocab size; pass --vocab-size", "vocab_size"
        )
    return int(vocab_size)


def _encoder(options: ServeOptions, stats: StatsSnapshot | None):
    """text -> ids with the daemon's tokenizer.json when it can be found locally, else None."""
    from llmd.bench.local_tokenizer import find_encoder

    return find_encoder(options.tokenizer or (None if stats is None else stats.daemon.model))


def build_sessions(options: ServeOptions, stats: StatsSnapshot | None) -> list[Session]:
    """The seeded workload the options describe."""
    if options.num_prompts < 1:
        raise InvalidParameterError("num_prompts must be at least 1", "num_prompts")
    if options.dataset == "sharegpt":
        if not options.dataset_path:
            raise InvalidParameterError("the sharegpt dataset needs --dataset-path", "dataset_path")
        return sharegpt_sessions(
            options.dataset_path, options.num_prompts, options.seed, _encoder(options, stats)
        )
    vocab_size = _vocab_size(options, stats)
    common = dict(output_len=options.output_len, vocab_size=vocab_size, seed=options.seed)
    if options.dataset == "random":
        return random_sessions(
            options.num_prompts, options.input_len, range_ratio=options.range_ratio, **common
        )
    if options.dataset == "shared-prefix":
        return shared_prefix_sessions(
            options.num_prompts, options.num_groups, options.prefix_len, options.input_len, **common
        )
    if options.dataset == "repeat":
        return repeat_sessions(
            options.num_prompts, options.input_len, options.output_len, options.seed
        )
    if options.dataset == "multi-turn":
        return multi_turn_sessions(
            options.num_prompts, options.num_turns, options.input_len, **common
        )
    raise InvalidParameterError(f"unknown dataset {options.dataset!r}", "dataset")


def shifted_sessions(sessions: list[Session], shift: int, vocab_size: int) -> list[Session]:
    """The sessions with every prompt id above the special ones moved `shift` places (mod vocab).

    A capacity search replays one workload at many rates; shifted ids keep its lengths,
    shared prefixes and arrival times but miss the prefix cache the previous probe filled.
    """
    span = vocab_size - FIRST_TOKEN_ID
    if not shift or span <= 1:
        return sessions

    def move(token: int) -> int:
        if not FIRST_TOKEN_ID <= token < vocab_size:
            return token
        return FIRST_TOKEN_ID + (token - FIRST_TOKEN_ID + shift) % span

    return [
        Session(tuple(
            dataclasses.replace(turn, prompt_token_ids=tuple(map(move, turn.prompt_token_ids)))
            for turn in session.turns
        ))
        for session in sessions
    ]  # fmt: skip


async def run_serve_async(
    options: ServeOptions, driver: Driver | None = None, token_shift: int = 0
) -> dict[str, Any]:
    """Run the benchmark against the daemon and return every figure (see report.py).

    `token_shift` moves every prompt id (shifted_sessions) so a replay misses the cache.
    """
    slo = Slo.parse(options.slo)
    if options.max_concurrency is not None and options.max_concurrency < 1:
        raise InvalidParameterError("max_concurrency must be at least 1", "max_concurrency")
    if options.http_url and options.dataset == "multi-turn":
        raise InvalidParameterError(
            "multi-turn resends each reply's token ids, which only the ZeroMQ daemon returns",
            "dataset",
        )
    if driver is None and options.http_url:
        from llmd.bench.http_driver import HttpDriver

        driver = HttpDriver(options.http_url, options.served_model)
    elif driver is None:
        from llmd.bench.zmq_driver import ZmqDriver

        driver = ZmqDriver(options.address)
    try:
        before = await driver.stats()
        sessions = build_sessions(options, before)
        if token_shift:
            vocab_size = _known_vocab_size(options, before) or 0
            sessions = shifted_sessions(sessions, token_shift, vocab_size)
        kind = (
            "gamma"
            if options.burstiness != 1.0 and options.arrival == "poisson"
            else options.arrival
        )
        offsets = arrival_offsets(
            len(sessions), options.request_rate, kind, options.burstiness, options.seed
        )
        num_requests = sum(len(session.turns) for session in sessions)
        progress = Progress(num_requests, sys.stderr if options.show_progress else None)
        generator = LoadGenerator(
            driver, sessions, offsets, options.max_concurrency, progress.update
        )
        records = await generator.run()
        progress.close()
        after = await driver.stats()
    finally:
        await driver.close()
    config = {**asdict(options), "arrival": kind, "request_rate": _json_rate(options.request_rate)}
    return build_result(records, slo, config, before, after)


def _json_rate(rate: float) -> float | str:
    return "inf" if math.isinf(rate) else rate


def run_serve(options: ServeOptions) -> dict[str, Any]:
    """Blocking wrapper of run_serve_async."""
    return asyncio.run(run_serve_async(options))


def warm_up(options: ServeOptions) -> None:
    """A few requests at once from an unused seed, so no measured run pays for start-up."""
    warmup = dataclasses.replace(
        options, num_prompts=NUM_WARMUP_REQUESTS, request_rate=math.inf, show_progress=False,
        slo=None, seed=options.seed + WARMUP_SEED_OFFSET,
    )  # fmt: skip
    asyncio.run(run_serve_async(warmup))


def run_capacity(
    options: ServeOptions,
    search: CapacityOptions,
    echo: Callable[[str], None] | None = None,
    warm_up_first: bool = True,
) -> tuple[Capacity, dict[str, Any]]:
    """Search the capacity at options.slo; returns it and the full result at that rate.

    Every probe runs options' workload at its own rate (its prompt ids shifted by the
    probe's index); the result returned is the highest passing probe's, or the lowest
    probe's when none passed.
    """
    slo = Slo.parse(options.slo)
    if slo.is_empty:
        raise InvalidParameterError("capacity at SLO needs targets: pass --slo", "capacity")
    if warm_up_first:
        warm_up(options)
    results: dict[float, dict[str, Any]] = {}

    def measure(rate: float) -> Probe:
        probe_options = dataclasses.replace(options, request_rate=rate)
        result = asyncio.run(run_serve_async(probe_options, token_shift=len(results)))
        results[rate] = result
        probe = Probe.from_result(result, rate)
        if echo is not None:
            verdict = "pass" if probe.passes(search.attainment_threshold) else "fail"
            echo(f"  probe {len(results)}: {rate_text(rate)} req/s, "
                 f"{100 * (probe.attainment or 0):.0f}% within SLO: {verdict}")  # fmt: skip
        return probe

    capacity = find_capacity(measure, search)
    shown = results[capacity.rate_rps] if capacity.rate_rps else results[search.min_rate_rps]
    return capacity, {**shown, "capacity_at_slo": capacity.to_json(slo.as_ms())}


def default_model_dir() -> Path:
    """The shipped default model's directory."""
    return Path(__file__).resolve().parent.parent / "default_model"
