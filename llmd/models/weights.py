"""Copies HF-named checkpoint tensors into llmd's fused modules, checking everything.

llmd fuses q/k/v and gate/up projections for speed, so checkpoint names do not map one to
one onto parameters; this class owns that mapping and refuses silent partial loads.
"""

from __future__ import annotations

import torch
from torch import nn

from llmd.errors import UnsupportedModelError

FUSED_SHARDS: dict[str, tuple[str, int]] = {
    "q_proj": ("qkv_proj", 0),
    "k_proj": ("qkv_proj", 1),
    "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
}
"""HF projection name -> (llmd fused module name, shard index along the output dim)."""

IGNORED_SUFFIXES = ("rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached")
"""Derived buffers some checkpoints carry; llmd recomputes them."""

KV_SCALE_SUFFIXES = {
    "self_attn.k_scale": ("self_attn", "k_scale"),
    "self_attn.v_scale": ("self_attn", "v_scale"),
    "self_attn.k_proj.output_scale": ("self_attn", "k_scale"),
    "self_attn.v_proj.output_scale": ("self_attn", "v_scale"),
}
"""An fp8 KV checkpoint's per-layer scales (compressed-tensors' names, and llm-compressor's
older output_scale ones) -> (attention module, attribute): the cache holds K / k_scale."""

_MAX_NAMES_SHOWN = 8


def fused_output_sizes(parent: nn.Module, fused_name: str) -> tuple[int, ...]:
    """Output widths of the shards of the fused projection `fused_name` owned by `parent`."""
    if fused_name == "qkv_proj":
        return (parent.q_size, parent.kv_size, parent.kv_size)
    half = parent.gate_up_proj.out_features // 2
    return (half, half)


class WeightLoader:
    """Loads tensors one at a time into `model`, then reports missing parameters."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.params = dict(model.named_parameters())
        self.loaded_names: set[str] = set()  # checkpoint (HF) names consumed
        self._loaded_shards: dict[str, set[int]] = {}  # llmd param name -> shard ids
        self._skip_lm_head = bool(getattr(model, "is_tied", False))

    def load(self, name: str, tensor: torch.Tensor) -> None:
        """Copy one checkpoint tensor into its (possibly fused) parameter."""
        if name.endswith(IGNORED_SUFFIXES):
            return
        if name == "lm_head.weight" and self._skip_lm_head:
            self.loaded_names.add(name)
            return
        if self._load_kv_scale(name, tensor):
            return
        param_name, shard_id = self._resolve(name)
        param = self.params.get(param_name)
        if param is None:
            raise UnsupportedModelError(
                f"checkpoint weight {name!r} has no counterpart in llmd's "
                f"{type(self.model).__name__}",
                "model",
            )
        target = param.data
        if shard_id is not None:
            parent_name, fused_name, _ = param_name.rsplit(".", 2)
            sizes = fused_output_sizes(self.model.get_submodule(parent_name), fused_name)
            start = sum(sizes[:shard_id])
            target = target.narrow(0, start, sizes[shard_id])
        if tuple(tensor.shape) != tuple(target.shape):
            raise UnsupportedModelError(
                f"checkpoint weight {name!r} has shape {tuple(tensor.shape)}, "
                f"expected {tuple(target.shape)} from the config",
                "model",
            )
        with torch.no_grad():
            target.copy_(tensor)
        self.loaded_names.add(name)
        self._loaded_shards.setdefault(param_name, set()).add(shard_id or 0)

    def _load_kv_scale(self, name: str, tensor: torch.Tensor) -> bool:
        """Set a layer's KV-cache scale from `name` if it is one; whether it was."""
        for suffix, (module_name, attribute) in KV_SCALE_SUFFIXES.items():
            if not name.endswith("." + suffix):
                continue
            layer = self.model.get_submodule(name[: -len(suffix)] + module_name)
            value = float(tensor.float().reshape(-1)[0]) if tensor.numel() == 1 else None
            if value is None or not value > 0 or value == float("inf"):
                raise UnsupportedModelError(
                    f"checkpoint KV scale {name!r} must be one positive finite number",
                    "model",
                )
            setattr(layer, attribute, value)
            layer.has_kv_scales = True
            self.loaded_names.add(name)
            return True
        return False

    def check_complete(self) -> None:
        """Raise naming every parameter (or fused shard) the checkpoint did not provide."""
        missing = []
        for param_name, _ in self.model.named_parameters():
            expected = self._expected_shards(param_name)
            if not expected <= self._loaded_shards.get(param_name, set()):
                missing.append(param_name)
        if missing:
            shown = ", ".join(missing[:_MAX_NAMES_SHOWN])
            num_hidden = len(missing) - _MAX_NAMES_SHOWN
            more = f" and {num_hidden} more" if num_hidden > 0 else ""
            raise UnsupportedModelError(
                f"checkpoint is missing weights for: {shown}{more}", "model"
            )

    def _resolve(self, name: str) -> tuple[str, int | None]:
        parts = name.split(".")
        if len(parts) >= 2 and parts[-2] in FUSED_SHARDS:
            fused_name, shard_id = FUSED_SHARDS[parts[-2]]
            return ".".join([*parts[:-2], fused_name, parts[-1]]), shard_id
        return name, None

    def _expected_shards(self, param_name: str) -> set[int]:
        fused_name = param_name.split(".")[-2] if "." in param_name else ""
        if fused_name == "qkv_proj":
            return {0, 1, 2}
        if fused_name == "gate_up_proj":
            return {0, 1}
        return {0}
