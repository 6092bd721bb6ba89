"""The keyword options of the clients' calls, declared once for both clients and their core.

`Client` and `AsyncClient` take the same keywords for generate and stream, and for stats and
subscribe; typing them here (with `Unpack`) keeps one list and one set of defaults, those of
`ClientCore.generate_request` and of the protocol's `SnapshotQuery`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypedDict

from llmd.sampling_params import SamplingParams


class PromptOptions(TypedDict, total=False):
    """What a generate sends besides a plain prompt and its sampling parameters."""

    messages: Sequence[Mapping[str, object]] | None
    """Chat messages, rendered by the daemon's chat template (instead of `prompt`)."""
    tools: Sequence[Mapping[str, object]] | None
    """Function tools for the chat template (with `messages`; OpenAI's shape)."""
    prompt_token_ids: Sequence[int] | None
    """Token ids to send as they are (instead of `prompt`)."""
    priority: int
    """Lower runs first under the daemon's priority policy (default 0)."""
    label: str | None
    """Letters, digits, `-_.:/+=@`: names the request in the daemon's log lines and in
    `llmd top`."""
    echo: bool
    """Also return the prompt's text and its tokens' texts (a prompt, not messages)."""


class GenerateOptions(PromptOptions, total=False):
    """The keywords of `generate` and `stream`."""

    params: SamplingParams | dict[str, object] | None
    """Sampling parameters (a dict of their fields is validated the same way)."""


class SnapshotOptions(TypedDict, total=False):
    """The keywords of `stats` and `subscribe`: what a snapshot includes (default: all)."""

    include_requests: bool
    include_block_map: bool
    timeline_request_id: str | None
    max_requests: int
