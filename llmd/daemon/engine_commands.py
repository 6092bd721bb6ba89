"""What other threads ask of the engine thread: add, abort or finish a request, a snapshot,
or a flush of the prefix cache.

Frozen commands queued to `EngineLoop.submit` and run between two steps, in order; they
carry plain data (token ids, sampling parameters, ids; a snapshot, the callback that takes
its answer), never a live engine object.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmd.engine.request import FinishReason
from llmd.errors import LLMDError
from llmd.sampling_params import SamplingParams

if TYPE_CHECKING:
    from llmd.engine.engine_snapshot import EngineSnapshot


@dataclass(frozen=True)
class AddCommand:
    """Queue a tokenized request in the engine."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    priority: int
    arrival_time: float
    label: str | None = None
    """The client's name for the request (an HTTP X-Request-Id)."""


@dataclass(frozen=True)
class AbortCommand:
    """Abort a request wherever it is."""

    request_id: str


@dataclass(frozen=True)
class FinishCommand:
    """End a request from outside the step (a stop string matched)."""

    request_id: str
    reason: FinishReason
    stop_reason: int | str | None = None
    num_output_tokens: int | None = None
    """Generated tokens delivered up to the stop; tokens the engine sampled after are dropped."""


@dataclass(frozen=True)
class SnapshotCommand:
    """Collect the engine's part of a stats snapshot and pass it to `on_ready`."""

    on_ready: Callable[[EngineSnapshot | None], None]
    include_requests: bool = True
    include_block_map: bool = True
    timeline_request_ids: tuple[str, ...] = ()
    max_requests: int = 64


@dataclass(frozen=True)
class FlushCacheCommand:
    """Drop the engine's cached prefixes; `on_done` gets the blocks dropped or the refusal."""

    on_done: Callable[[int | LLMDError], None]


EngineCommand = AddCommand | AbortCommand | FinishCommand | SnapshotCommand | FlushCacheCommand
"""Everything `EngineLoop.submit` takes; the engine thread dispatches on the class."""
