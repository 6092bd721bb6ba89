"""Reads a checkpoint's `quantization_config` into a `QuantizationConfig` of `WeightScheme`s.

Detection happens once, from config.json, before any tensor is read: an unsupported
method, format or scheme stops the load with an error naming it, instead of a shape
error deep in the weight loader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from llmd.errors import InvalidParameterError, UnsupportedQuantizationError
from llmd.quantization.weight_scheme import FLOAT_FORMATS, INT_FORMATS, STRATEGIES, WeightScheme

SUPPORTED_METHODS = ("compressed-tensors", "awq", "gptq", "fp8")
"""The `quant_method` values llmd loads."""
LINEAR_TARGET = "Linear"
"""compressed-tensors' class-name target that matches every linear layer."""


@dataclass(frozen=True)
class SchemeGroup:
    """A scheme and the modules it applies to (compressed-tensors' `config_groups` entry)."""

    targets: tuple[str, ...]
    """"Linear", exact module names, or "re:" regular expressions matched at the start."""
    scheme: WeightScheme


@dataclass(frozen=True)
class QuantizationConfig:
    """A checkpoint's quantization: its method, scheme groups and the modules left dense."""

    method: str
    groups: tuple[SchemeGroup, ...]
    ignore: tuple[str, ...] = ()
    """Modules kept dense, in the targets' syntax."""

    @property
    def name(self) -> str:
        """What status and logs show: e.g. "compressed-tensors w4a16-g128"."""
        schemes = sorted({group.scheme.name for group in self.groups})
        return f"{self.method} {'+'.join(schemes)}"

    def scheme_for(self, module_name: str) -> WeightScheme | None:
        """The scheme of the linear layer `module_name` (an HF name), None if it is dense."""
        if any(_matches(module_name, target) for target in self.ignore):
            return None
        for group in self.groups:
            if any(_matches(module_name, target) for target in group.targets):
                return group.scheme
        return None


def read_quantization_config(hf_config: Any) -> QuantizationConfig | None:
    """The checkpoint's quantization, or None for a dense checkpoint; raise if unsupported."""
    raw = getattr(hf_config, "quantization_config", None)
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raw = raw.to_dict() if hasattr(raw, "to_dict") else vars(raw)
    method = str(raw.get("quant_method", "")).lower()
    if method == "compressed-tensors":
        return _compressed_tensors_config(raw)
    if method == "awq":
        return _awq_config(raw)
    if method == "gptq":
        return _gptq_config(raw)
    if method == "fp8":
        return _hf_fp8_config(raw)
    raise UnsupportedQuantizationError(
        f"quantization method {method or 'unnamed'!r} (quantization_config.quant_method) is "
        f"not supported; llmd loads {', '.join(SUPPORTED_METHODS)}",
        "model",
    )


DEQUANTIZE = "dequantize"
"""The `--quantization` choice that reads quantized weights and runs them dense."""


def checked_quantization_config(
    hf_config: Any, requested: str = "auto"
) -> QuantizationConfig | None:
    """The checkpoint's quantization, refusing a `--quantization` method it does not have."""
    config = read_quantization_config(hf_config)
    if requested in ("auto", DEQUANTIZE):
        if requested == DEQUANTIZE and config is None:
            raise InvalidParameterError(
                "dequantize needs a quantized checkpoint; this one is dense", "quantization"
            )
        return config
    found = "dense" if config is None else f"quantized with {config.method}"
    if config is None or config.method != requested:
        raise InvalidParameterError(
            f"the checkpoint is {found}, not {requested} (auto follows the checkpoint)",
            "quantization",
        )
    return config


def quantization_name(hf_config: Any, requested: str = "auto") -> str:
    """The checkpoint's quantization as status shows it ("" for a dense checkpoint)."""
    config = read_quantization_config(hf_config)
    if config is None:
        return ""
    return f"{config.name} ({DEQUANTIZE}d)" if requested == DEQUANTIZE else config.name


def _refuse(field: str, value: Any, supported: str) -> UnsupportedQuantizationError:
    return UnsupportedQuantizationError(
        f"quantization_config.{field} = {value!r} is not supported (llmd reads {supported})",
        "model",
    )


def _compressed_tensors_config(raw: dict[str, Any]) -> QuantizationConfig:
    status = raw.get("quantization_status", "compressed")
    if status != "compressed":
        raise _refuse("quantization_status", status, "'compressed' checkpoints")
    sparsity = raw.get("sparsity_config") or {}
    if sparsity and sparsity.get("format", "dense") != "dense":
        raise _refuse("sparsity_config.format", sparsity.get("format"), "dense weights")
    if raw.get("transform_config"):
        raise _refuse("transform_config", "(set)", "checkpoints without transforms")
    top_format = raw.get("format")
    groups = []
    for group_name, group in (raw.get("config_groups") or {}).items():
        field = f"config_groups.{group_name}"
        if not isinstance(group, dict):
            raise _refuse(field, group, "schemes written out in full, not preset names")
        weights = group.get("weights")
        if weights is None:
            continue  # activation-only groups change no weight
        scheme = _compressed_tensors_scheme(
            field, weights, group.get("input_activations"), group.get("format") or top_format
        )
        groups.append(SchemeGroup(tuple(group.get("targets") or ()), scheme))
    if not groups:
        raise _refuse("config_groups", raw.get("config_groups"), "at least one weight scheme")
    return QuantizationConfig("compressed-tensors", tuple(groups), tuple(raw.get("ignore") or ()))


def _compressed_tensors_scheme(
    field: str, weights: dict[str, Any], activations: dict[str, Any] | None, fmt: Any
) -> WeightScheme:
    is_float = weights.get("type", "int") == "float"
    num_bits = int(weights.get("num_bits", 8))
    strategy = weights.get("strategy") or ("group" if weights.get("group_size") else "tensor")
    if strategy not in STRATEGIES:
        raise _refuse(f"{field}.weights.strategy", strategy, ", ".join(STRATEGIES))
    if is_float:
        if num_bits != 8 or fmt not in FLOAT_FORMATS:
            raise _refuse(f"{field}.format", f"{fmt} with {num_bits}-bit floats", "8-bit fp8")
    elif num_bits not in (4, 8) or fmt not in INT_FORMATS:
        raise _refuse(
            f"{field}.format", f"{fmt} with int{num_bits}", f"int4/int8 in {', '.join(INT_FORMATS)}"
        )
    if weights.get("dynamic") not in (None, False):
        raise _refuse(f"{field}.weights.dynamic", weights.get("dynamic"), "static weight scales")
    group_size = weights.get("group_size") if strategy == "group" else None
    if strategy == "group" and not (isinstance(group_size, int) and group_size > 0):
        raise _refuse(f"{field}.weights.group_size", group_size, "a positive group size")
    block = weights.get("block_structure") if strategy == "block" else None
    if strategy == "block" and not (isinstance(block, list) and len(block) == 2):
        raise _refuse(f"{field}.weights.block_structure", block, "[rows, columns]")
    return WeightScheme(
        method="compressed-tensors",
        format=str(fmt),
        num_bits=num_bits,
        is_float=is_float,
        strategy=strategy,
        group_size=group_size,
        block_structure=(int(block[0]), int(block[1])) if block else None,
        is_symmetric=bool(weights.get("symmetric", True)),
        quantizes_activations=activations is not None,
    )


def _awq_config(raw: dict[str, Any]) -> QuantizationConfig:
    version = str(raw.get("version", "gemm")).lower()
    if version != "gemm":
        raise _refuse("version", version, "AWQ's 'gemm' packing")
    bits = raw.get("bits", raw.get("w_bit"))
    if bits != 4:
        raise _refuse("bits", bits, "4-bit AWQ")
    if not raw.get("zero_point", True):
        raise _refuse("zero_point", False, "AWQ with zero points")
    scheme = WeightScheme(
        method="awq",
        format="awq-gemm",
        num_bits=4,
        strategy="group",
        group_size=_group_size(raw.get("group_size", raw.get("q_group_size"))),
        is_symmetric=False,
    )
    skipped = tuple(f"re:.*{re.escape(name)}" for name in raw.get("modules_to_not_convert") or ())
    return QuantizationConfig("awq", (SchemeGroup(("re:.*\\.layers\\.",), scheme),), skipped)


def _gptq_config(raw: dict[str, Any]) -> QuantizationConfig:
    if raw.get("bits") != 4:
        raise _refuse("bits", raw.get("bits"), "4-bit GPTQ")
    if raw.get("dynamic"):
        raise _refuse("dynamic", "(per-module overrides)", "one scheme for every layer")
    checkpoint_format = str(raw.get("checkpoint_format", "gptq")).lower()
    if checkpoint_format not in ("gptq", "gptq_v2"):
        raise _refuse("checkpoint_format", checkpoint_format, "'gptq' or 'gptq_v2'")
    group_size = raw.get("group_size", 128)
    scheme = WeightScheme(
        method="gptq",
        format="gptq",
        num_bits=4,
        strategy="channel" if group_size == -1 else "group",
        group_size=None if group_size == -1 else _group_size(group_size),
        is_symmetric=bool(raw.get("sym", True)),
        gptq_zero_offset=1 if checkpoint_format == "gptq" else 0,
    )
    return QuantizationConfig("gptq", (SchemeGroup(("re:.*\\.layers\\.",), scheme),))


HF_FP8_DEFAULT_BLOCK = [128, 128]
"""transformers' `weight_block_size` when the config leaves it out (null: per tensor)."""
HF_FP8_ACTIVATION_SCHEMES = ("dynamic", "static")
HF_FP8_ROUTERS = "re:.*\\.mlp\\.gate$"
"""MoE routers: no `nn.Linear` in transformers, so never converted (llmd's are linears)."""


def _hf_fp8_config(raw: dict[str, Any]) -> QuantizationConfig:
    """transformers' own FP8 (`FineGrainedFP8Config`: Qwen3-*-FP8, DeepSeek-V3)."""
    scheme_name = str(raw.get("activation_scheme", "dynamic")).lower()
    if scheme_name not in HF_FP8_ACTIVATION_SCHEMES:
        raise _refuse("activation_scheme", scheme_name, "'dynamic' or 'static' (per tensor)")
    for field, default, supported in (("scale_fmt", "float", "float32 scales ('float')"),
                                      ("expert_dtype", "fp8", "fp8 experts"),
                                      ("fmt", "e4m3", "float8_e4m3fn ('e4m3')")):  # fmt: skip
        if raw.get(field, default) != default:
            raise _refuse(field, raw[field], supported)
    if raw.get("modules_to_convert"):
        raise _refuse("modules_to_convert", raw["modules_to_convert"], "fp8 linears only")
    block = raw.get("weight_block_size", HF_FP8_DEFAULT_BLOCK)
    if block is not None and not (
        isinstance(block, (list, tuple)) and len(block) == 2
        and all(isinstance(size, int) and size > 0 for size in block)
    ):  # fmt: skip
        raise _refuse("weight_block_size", block, "[rows, columns] of positive sizes or null")
    scheme = WeightScheme(
        method="fp8",
        format="fp8",
        num_bits=8,
        is_float=True,
        strategy="tensor" if block is None else "block",
        block_structure=None if block is None else (int(block[0]), int(block[1])),
        quantizes_activations=True,
    )
    skipped = raw.get("modules_to_not_convert", raw.get("ignored_layers"))
    if skipped is None:
        skipped = ["lm_head"]  # transformers keeps the output head dense by default
    ignore = tuple(_hf_skip_target(str(name)) for name in skipped)
    return QuantizationConfig("fp8", (SchemeGroup((LINEAR_TARGET,), scheme),),
                              (*ignore, HF_FP8_ROUTERS))  # fmt: skip


def _hf_skip_target(pattern: str) -> str:
    """transformers' `modules_to_not_convert` rule as a "re:" target: the pattern as a regex
    from the start, up to a module boundary, or the name's literal suffix."""
    target = f"(?:(?:{pattern})(?:(?<=\\.)|(?=\\.|$))|.*{re.escape(pattern)}$)"
    try:
        re.compile(target)
    except re.error as error:
        raise _refuse("modules_to_not_convert", pattern, f"regular expressions ({error})") from None
    return f"re:{target}"


def _group_size(value: Any) -> int:
    if not (isinstance(value, int) and value > 0):
        raise _refuse("group_size", value, "a positive group size")
    return value


def _matches(module_name: str, target: str) -> bool:
    if target == LINEAR_TARGET:
        return True
    if target.startswith("re:"):
        return re.match(target[3:], module_name) is not None
    return target == module_name
