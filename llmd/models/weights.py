"""Copies HF-named checkpoint tensors into llmd's fused modules, checking everything.

llmd fuses q/k/v and gate/up projections for speed, so checkpoint names do not map one to
one onto parameters; this class owns that mapping and refuses silent partial loads.
"""

from __future__ import annotations

import re

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

EXPERT_WEIGHT = re.compile(r"^(.+\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
"""One routed expert's projection in a checkpoint (`...mlp.experts.7.up_proj.weight`): a
slice of the MoE layer's stacked `experts.gate_up_proj` [E, 2I, H] or `experts.down_proj`."""

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
        expert = EXPERT_WEIGHT.match(name)
        if expert is not None and self._load_expert(name, tensor, expert):
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
        shards = self._expected_shards(param_name) if shard_id is None else {shard_id}
        self._copy_checked(name, tensor, target, param_name, shards)

    def _load_expert(self, name: str, tensor: torch.Tensor, match: re.Match[str]) -> bool:
        """Copy one expert's projection into its slice of the stacked expert weights;
        whether `name` was one (a dense `experts.N` module of another model is not)."""
        experts, expert_id, projection = match[1], int(match[2]), match[3]
        param_name = f"{experts}.{'down_proj' if projection == 'down_proj' else 'gate_up_proj'}"
        param = self.params.get(param_name)
        if param is None or param.dim() != 3:
            return False
        if expert_id >= param.shape[0]:
            raise UnsupportedModelError(
                f"checkpoint weight {name!r} names expert {expert_id}, but the config has "
                f"{param.shape[0]} experts",
                "model",
            )
        target = param.data[expert_id]
        shard_id = expert_id
        if projection != "down_proj":
            is_up = projection == "up_proj"
            half = target.shape[0] // 2
            target = target.narrow(0, half if is_up else 0, half)
            shard_id = 2 * expert_id + int(is_up)
        self._copy_checked(name, tensor, target, param_name, {shard_id})
        return True

    def _copy_checked(
        self, name: str, tensor: torch.Tensor, target: torch.Tensor, param_name: str,
        shards: set[int],
    ) -> None:  # fmt: skip
        """Copy checkpoint tensor `name` into `target` (a parameter or its slice), refusing a
        shape the config does not give, and record `param_name`'s `shards` as loaded."""
        if tuple(tensor.shape) != tuple(target.shape):
            raise UnsupportedModelError(
                f"checkpoint weight {name!r} has shape {tuple(tensor.shape)}, "
                f"expected {tuple(target.shape)} from the config",
                "model",
            )
        with torch.no_grad():
            target.copy_(tensor)
        self.loaded_names.add(name)
        self._loaded_shards.setdefault(param_name, set()).update(shards)

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
        if param_name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            num_experts = self.params[param_name].shape[0]
            is_gate_up = param_name.endswith("gate_up_proj")
            return set(range(2 * num_experts if is_gate_up else num_experts))
        fused_name = param_name.split(".")[-2] if "." in param_name else ""
        if fused_name == "qkv_proj":
            return {0, 1, 2}
        if fused_name == "gate_up_proj":
            return {0, 1}
        return {0}
