"""Qwen2 / Qwen2.5 checkpoints: the Llama decoder with biased q/k/v projections.

Kept as a subclass that only changes the bias flags so the decoder exists once (llama.py).
"""

from __future__ import annotations

from typing import Any

from llmd.models.llama import LlamaForCausalLM


class Qwen2ForCausalLM(LlamaForCausalLM):
    """Qwen2: q/k/v projections always have a bias, o_proj never does."""

    @classmethod
    def projection_biases(cls, hf_config: Any) -> tuple[bool, bool]:
        """The biases are fixed by the architecture; Qwen2 configs have no flag for them."""
        return True, False
