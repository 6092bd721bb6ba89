"""Maps a checkpoint's `architectures` entry to the llmd model class that runs it.

One table is the single place that says what llmd supports, so error messages and docs
can list it and adding an architecture is one line.
"""

from __future__ import annotations

from typing import Any

from llmd.errors import UnsupportedModelError
from llmd.models.llama import LlamaForCausalLM, MistralForCausalLM
from llmd.models.mixtral import MixtralForCausalLM
from llmd.models.qwen2 import Qwen2ForCausalLM
from llmd.models.qwen2_moe import Qwen2MoeForCausalLM
from llmd.models.qwen3 import Qwen3ForCausalLM
from llmd.models.qwen3_moe import Qwen3MoeForCausalLM

SUPPORTED_ARCHITECTURES: dict[str, type] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": MistralForCausalLM,
    "Qwen2ForCausalLM": Qwen2ForCausalLM,
    "Qwen3ForCausalLM": Qwen3ForCausalLM,
    "Qwen3MoeForCausalLM": Qwen3MoeForCausalLM,
    "MixtralForCausalLM": MixtralForCausalLM,
    "Qwen2MoeForCausalLM": Qwen2MoeForCausalLM,
}

_MODEL_TYPES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
}
"""Fallback for configs saved without `architectures` (e.g. built by hand)."""


def model_class_for(hf_config: Any) -> type:
    """Return the class for the config's first supported architecture, or raise naming them."""
    architectures = list(getattr(hf_config, "architectures", None) or [])
    for architecture in architectures:
        if architecture in SUPPORTED_ARCHITECTURES:
            return SUPPORTED_ARCHITECTURES[architecture]
    model_type = getattr(hf_config, "model_type", None)
    if not architectures and model_type in _MODEL_TYPES:
        return SUPPORTED_ARCHITECTURES[_MODEL_TYPES[model_type]]
    found = ", ".join(architectures) or f"none (model_type {model_type!r})"
    raise UnsupportedModelError(
        f"architecture {found} is not supported; supported architectures: "
        f"{', '.join(SUPPORTED_ARCHITECTURES)}",
        "model",
    )
