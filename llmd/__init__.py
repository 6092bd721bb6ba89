"""llmd: a single-node LLM serving engine and daemon.

`LLM` (the offline API) is imported lazily because it pulls in torch; the sampling
parameters, output constraints, config and errors stay importable on machines without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmd.sampling_params import SamplingParams
from llmd.structured_outputs import StructuredOutputs

if TYPE_CHECKING:
    from llmd.llm import LLM

__all__ = ["LLM", "SamplingParams", "StructuredOutputs"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "LLM":
        from llmd.llm import LLM

        return LLM
    raise AttributeError(f"module 'llmd' has no attribute {name!r}")
