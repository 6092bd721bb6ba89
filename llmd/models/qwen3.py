"""Qwen3 dense checkpoints: the Llama decoder with per-head q/k RMSNorm and explicit head_dim.

Kept as a subclass that only flips flags so the decoder exists once (see llama.py).
"""

from __future__ import annotations

from llmd.models.llama import LlamaForCausalLM


class Qwen3ForCausalLM(LlamaForCausalLM):
    """Qwen3: queries and keys are RMS-normalized per head before rope."""

    use_qk_norm = True
