"""Finds a checkpoint, reads its config and builds a ready-to-run llmd model from it.

Resolution, config parsing and weight loading live together so the runner has one entry
point and every failure (missing model, unsupported architecture, bad weights) surfaces as
a typed llmd error with a message that says what to do.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import transformers

from llmd.attention.backend import AttentionBackend
from llmd.errors import ModelNotFoundError, UnsupportedModelError
from llmd.models.llama import head_dim_of, num_kv_heads_of
from llmd.models.registry import model_class_for
from llmd.quantization.quant_config import DEQUANTIZE, checked_quantization_config
from llmd.quantization.quantized_loader import QuantizedLoader

HUB_ALLOW_PATTERNS = [
    "*.json",
    "*.safetensors",
    "tokenizer.model",
    "*.tiktoken",
    "*.txt",
]
"""Files fetched from the hub: config, weights and tokenizer files; never pickled weights."""

SAFETENSORS_INDEX = "model.safetensors.index.json"
_TRUTHY = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class ModelShape:
    """The sizes the engine needs to size the KV cache and compute FLOP/bandwidth metrics.

    `sliding_window` is set when the checkpoint uses sliding-window attention (Mistral,
    some Qwen); llmd computes full attention, which is exact only while the context fits in
    the window, so the engine must cap max_model_len at `max_model_len` below.
    """

    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    num_params: int
    """Distinct parameters (tied embeddings counted once)."""
    sliding_window: int | None = None
    tie_word_embeddings: bool = False
    """True when the output projection shares the input embedding table."""
    num_experts: int = 0
    """Routed experts per MoE layer (0: a dense model)."""
    num_experts_per_token: int = 0
    num_moe_layers: int = 0
    num_params_per_expert: int = 0
    """Parameters of one routed expert: what a step reads per (layer, expert) it touches."""

    @property
    def max_model_len(self) -> int:
        """Longest context llmd computes exactly: max positions, capped by the window."""
        if self.sliding_window is None:
            return self.max_position_embeddings
        return min(self.max_position_embeddings, self.sliding_window)

    def kv_bytes_per_token(self, element_size: int) -> int:
        """KV-cache bytes one token takes across all layers (keys and values)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * element_size


def resolve_model_path(model: str) -> pathlib.Path:
    """Return a local checkpoint directory for a path or a hub id (downloading if allowed)."""
    local = pathlib.Path(model).expanduser()
    if local.is_dir():
        return local
    if _looks_local(model):
        raise ModelNotFoundError(f"no model directory at {str(local)!r}", "model")
    return _download_from_hub(model)


def load_hf_config(path: str | os.PathLike[str]) -> transformers.PretrainedConfig:
    """Read the checkpoint's config.json (never running remote code)."""
    try:
        return transformers.AutoConfig.from_pretrained(str(path), trust_remote_code=False)
    except OSError as error:
        raise ModelNotFoundError(f"no readable config.json in {path}: {error}", "model") from error
    except (ValueError, KeyError) as error:
        raise UnsupportedModelError(f"unsupported config in {path}: {error}", "model") from error


def load_model(
    path: str | os.PathLike[str],
    hf_config: transformers.PretrainedConfig,
    attention_backend: AttentionBackend,
    dtype: torch.dtype,
    device: torch.device,
    quantization_override: str = "auto",
) -> torch.nn.Module:
    """Build the model for `hf_config` on `device` in `dtype` and load its safetensors
    (quantized linears as `quantization_override`, EngineConfig.quantization, says)."""
    model_class = model_class_for(hf_config)
    quantization = checked_quantization_config(hf_config, quantization_override)
    # Build on the meta device so no time is spent initializing weights we overwrite.
    with torch.device("meta"):
        model = model_class(hf_config, attention_backend)
    quantized = None
    if quantization is not None:
        quantized = QuantizedLoader(quantization, quantization_override == DEQUANTIZE)
    if quantized is not None:
        quantized.place_slots(model)  # before allocation: no dense copy of quantized weights
    model = model.to(dtype=dtype).to_empty(device=device)
    weights = iter_checkpoint_weights(pathlib.Path(path))
    model.load_weights(weights if quantized is None else quantized.intercept(weights))
    if quantized is not None:
        quantized.install(model, dtype, device)
    model.requires_grad_(False)
    return model.eval()


def model_shape(hf_config: transformers.PretrainedConfig) -> ModelShape:
    """Sizes of the model `hf_config` describes, with its exact parameter count."""
    with torch.device("meta"):
        model = model_class_for(hf_config)(hf_config, None)
    num_params = sum(param.numel() for param in model.parameters())
    spec = model.moe_spec(hf_config) if hasattr(model, "moe_spec") else None
    return ModelShape(
        num_layers=hf_config.num_hidden_layers,
        num_heads=hf_config.num_attention_heads,
        num_kv_heads=num_kv_heads_of(hf_config),
        head_dim=head_dim_of(hf_config),
        hidden_size=hf_config.hidden_size,
        intermediate_size=hf_config.intermediate_size,
        vocab_size=hf_config.vocab_size,
        max_position_embeddings=hf_config.max_position_embeddings,
        num_params=num_params,
        sliding_window=_effective_sliding_window(hf_config),
        tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
        num_experts=0 if spec is None else spec.num_experts,
        num_experts_per_token=0 if spec is None else spec.num_experts_per_token,
        num_moe_layers=0 if spec is None else spec.num_moe_layers,
        num_params_per_expert=0
        if spec is None
        else spec.num_params_per_expert(hf_config.hidden_size),
    )


def checkpoint_files(path: pathlib.Path) -> list[pathlib.Path]:
    """The safetensors files of a checkpoint: the index's shards, or every *.safetensors."""
    index_path = path / SAFETENSORS_INDEX
    if index_path.is_file():
        weight_map = json.loads(index_path.read_text())["weight_map"]
        return [path / name for name in sorted(set(weight_map.values()))]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise UnsupportedModelError(
            f"no .safetensors weights in {path} (pickled .bin checkpoints are not supported)",
            "model",
        )
    return files


def iter_checkpoint_weights(path: pathlib.Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (HF name, CPU tensor) for every tensor of the checkpoint, one shard at a time.

    Tensors are memory-mapped on the host; copying into the parameters moves and casts them.
    """
    from safetensors import safe_open

    for file in checkpoint_files(path):
        with safe_open(str(file), framework="pt", device="cpu") as shard:
            for name in shard.keys():  # noqa: SIM118 - safe_open is not a mapping
                yield name, shard.get_tensor(name)


def _effective_sliding_window(hf_config: Any) -> int | None:
    """The attention window if any layer uses one (Qwen marks them in layer_types)."""
    window = getattr(hf_config, "sliding_window", None)
    if not window:
        return None
    layer_types = getattr(hf_config, "layer_types", None)
    if layer_types is not None:
        return window if "sliding_attention" in layer_types else None
    if getattr(hf_config, "use_sliding_window", True) is False:
        return None
    return int(window)


def _looks_local(model: str) -> bool:
    """Whether `model` is meant as a filesystem path rather than an `org/name` hub id."""
    return (
        os.path.isabs(model)
        or model.startswith((".", "~"))
        or "\\" in model
        or model.count("/") > 1
        or os.path.exists(model)
    )


def _is_offline() -> bool:
    return any(
        os.environ.get(variable, "").lower() in _TRUTHY
        for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _download_from_hub(repo_id: str) -> pathlib.Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError

    is_offline = _is_offline()
    try:
        snapshot = snapshot_download(
            repo_id, allow_patterns=HUB_ALLOW_PATTERNS, local_files_only=is_offline
        )
    except (HfHubHTTPError, HFValidationError, OSError, ValueError) as error:
        how = "offline mode is on (HF_HUB_OFFLINE)" if is_offline else "the hub is unreachable"
        raise ModelNotFoundError(
            f"{repo_id!r} is not a local directory and could not be fetched from the "
            f"Hugging Face hub ({how}, or the id does not exist): {type(error).__name__}",
            "model",
        ) from error
    return pathlib.Path(snapshot)
