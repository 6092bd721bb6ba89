"""`QuantizedLoader`: puts a quantized checkpoint's linears into an llmd model.

It works around the ordinary weight loader rather than inside it: on the meta model it
swaps each quantized `nn.Linear` for a `LinearSlot` (so no dense weight is allocated), it
takes the quantized tensors out of the checkpoint stream (everything else, biases
included, loads as before), and once the stream ends it reads each slot's shards and
installs the layer `build_linear` chose. The models themselves know nothing of it. MoE
experts are no linears but slices of stacked parameters: their quantized tensors are held
the same way and, once the stream ends, passed on as dequantized float32 weights, so the
experts load dense.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator

import torch
from torch import nn

from llmd.errors import UnsupportedQuantizationError
from llmd.models.weights import EXPERT_WEIGHT, FUSED_SHARDS, fused_output_sizes
from llmd.quantization import awq_format, compressed_tensors_format, gptq_format, hf_fp8_format
from llmd.quantization.linear_builder import DENSE, Shard, build_linear, dense_weight
from llmd.quantization.linear_slot import LinearSlot
from llmd.quantization.module_tensors import ModuleTensors
from llmd.quantization.quant_config import QuantizationConfig
from llmd.quantization.weight_scheme import WeightScheme

logger = logging.getLogger(__name__)

SHARDS_OF_FUSED: dict[str, tuple[str, ...]] = {
    fused: tuple(sorted((hf for hf in FUSED_SHARDS if FUSED_SHARDS[hf][0] == fused),
                        key=lambda hf: FUSED_SHARDS[hf][1]))
    for fused, _ in FUSED_SHARDS.values()
}  # fmt: skip
"""llmd fused projection -> its HF projections in output order (q, k, v; gate, up)."""

TIED_HEAD = "lm_head"
"""Read dense, never slotted: the model may tie it to the embedding after loading."""


class QuantizedLoader:
    """Slots, intercepted tensors and the installed layers of one model's load."""

    def __init__(self, config: QuantizationConfig, is_dequantizing: bool = False) -> None:
        self.config = config
        self.is_dequantizing = is_dequantizing
        """Run every quantized linear dense (`--quantization dequantize`)."""
        self.tensors: dict[str, ModuleTensors] = {}
        """HF module name -> its quantized tensors, for every shard of every slot."""
        self.schemes: dict[str, WeightScheme] = {}
        """HF module name -> its scheme."""
        self.dense_heads: list[str] = []
        """Quantized modules read back as a dense `.weight` (the output head)."""
        self.suffixes = set(_suffixes(config.method))
        self.kinds: Counter[str] = Counter()
        """How many linears got each kind of layer ("int4", "int8", "dense")."""
        self.expert_shapes: dict[str, tuple[int, int]] = {}
        """llmd name of a stacked expert parameter ("...experts.gate_up_proj") -> the
        (out, in) shape of one expert's HF projection in it."""
        self.checkpoint_name = lambda name: name
        """The model's renaming of checkpoint tensors (Mixtral's experts)."""
        self.dense_experts: list[str] = []
        """Quantized expert projections (HF module names), read back as a dense `.weight`."""

    def place_slots(self, model: nn.Module) -> int:
        """Swap every quantized `nn.Linear` of the meta-built `model` for a slot; how many."""
        linears = [
            (name, module)
            for name, module in model.named_modules()
            if isinstance(module, nn.Linear)
        ]
        self.checkpoint_name = getattr(model, "checkpoint_name", self.checkpoint_name)
        for name, param in model.named_parameters():
            if name.endswith(("experts.gate_up_proj", "experts.down_proj")) and param.dim() == 3:
                rows, cols = param.shape[1:]  # gate_up [E, 2I, H], down [E, H, I]
                is_gate_up = name.endswith("gate_up_proj")
                self.expert_shapes[name] = (rows // 2, cols) if is_gate_up else (rows, cols)
        num_slots = 0
        for name, linear in linears:
            parent_name, _, child_name = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            hf_names = _shard_names(parent_name, child_name)
            schemes = [self.config.scheme_for(hf_name) for hf_name in hf_names]
            if all(scheme is None for scheme in schemes):
                continue
            if any(scheme is None for scheme in schemes) or len(set(schemes)) > 1:
                raise UnsupportedQuantizationError(
                    f"{', '.join(hf_names)} are fused into {name} but quantized differently "
                    f"({', '.join(str(s.name) if s else 'dense' for s in schemes)})",
                    "model",
                )
            scheme = schemes[0]
            assert scheme is not None
            sizes = (linear.out_features,)
            if child_name in SHARDS_OF_FUSED:
                sizes = fused_output_sizes(parent, child_name)
            for hf_name, size in zip(hf_names, sizes, strict=True):
                self.tensors[hf_name] = ModuleTensors(hf_name, (size, linear.in_features))
                self.schemes[hf_name] = scheme
            if name == TIED_HEAD:
                if not getattr(model, "is_tied", False):  # a tied head has no tensors
                    self.dense_heads.append(name)
                else:
                    del self.tensors[name], self.schemes[name]
                continue
            setattr(parent, child_name, LinearSlot(linear, hf_names, sizes, scheme))
            num_slots += 1
        return num_slots

    def intercept(
        self, weights: Iterable[tuple[str, torch.Tensor]]
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """The checkpoint stream without the slots' quantized tensors, plus dense heads."""
        for name, tensor in weights:
            module, _, suffix = name.rpartition(".")
            entry = self.tensors.get(module)
            if entry is None and suffix in self.suffixes:
                entry = self._quantized_expert(module)
            if entry is not None and suffix in self.suffixes:
                entry.by_suffix[suffix] = tensor
                continue
            yield name, tensor
        for name in self.dense_heads:
            self.kinds[DENSE] += 1
            yield f"{name}.weight", dense_weight(self.read(name))
        for name in self.dense_experts:
            yield f"{name}.weight", dense_weight(self.read(name))
            self.tensors[name].by_suffix.clear()

    def _quantized_expert(self, hf_module: str) -> ModuleTensors | None:
        """A new entry for `hf_module` if it is a routed expert's projection the config
        quantizes, else None (its tensors load as they are)."""
        expert = EXPERT_WEIGHT.match(self.checkpoint_name(f"{hf_module}.weight"))
        if expert is None:
            return None
        stacked = "down_proj" if expert[3] == "down_proj" else "gate_up_proj"
        shape = self.expert_shapes.get(f"{expert[1]}.{stacked}")
        scheme = self.config.scheme_for(hf_module)
        if shape is None or scheme is None:
            return None
        self.tensors[hf_module] = ModuleTensors(hf_module, shape)
        self.schemes[hf_module] = scheme
        self.dense_experts.append(hf_module)
        return self.tensors[hf_module]

    def read(self, hf_name: str) -> Shard:
        """One HF module's weight from its intercepted tensors (raising naming a bad one)."""
        entry, scheme = self.tensors[hf_name], self.schemes[hf_name]
        if scheme.method == "awq":
            return awq_format.read_awq(entry, scheme)
        if scheme.method == "gptq":
            return gptq_format.read_gptq(entry, scheme)
        if scheme.method == "fp8":
            return hf_fp8_format.read_hf_fp8(entry, scheme)
        return compressed_tensors_format.read_compressed_tensors(entry, scheme)

    def install(self, model: nn.Module, dtype: torch.dtype, device: torch.device) -> None:
        """Replace every slot with its layer, built from the tensors the stream held."""
        slots = [
            (name, module)
            for name, module in model.named_modules()
            if isinstance(module, LinearSlot)
        ]
        for name, slot in slots:
            shards = [self.read(hf_name) for hf_name in slot.shard_names]
            bias = None if slot.bias is None else slot.bias.detach()
            layer, kind = build_linear(shards, bias, dtype, device, self.is_dequantizing)
            parent_name, _, child_name = name.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, child_name, layer)
            self.kinds[kind] += 1
            for hf_name in slot.shard_names:
                self.tensors[hf_name].by_suffix.clear()  # the layer holds its own copies
        summary = ", ".join(f"{count} {kind}" for kind, count in sorted(self.kinds.items()))
        logger.info("quantized weights (%s): linears %s", self.config.name, summary)
        if self.dense_experts:
            logger.info(
                "%d quantized expert projections were dequantized at load: llmd has no "
                "quantized MoE kernel yet, so the experts cost dense memory and time",
                len(self.dense_experts),
            )
        if self.kinds[DENSE]:
            logger.info(
                "%d quantized linears were dequantized to %s at load (fp8 weights, other "
                "devices, or schemes without an llmd kernel): they cost dense memory and time",
                self.kinds[DENSE],
                str(dtype).removeprefix("torch."),
            )


def _shard_names(parent_name: str, child_name: str) -> tuple[str, ...]:
    """The HF module names whose weights make up llmd's `parent.child` linear."""
    prefix = f"{parent_name}." if parent_name else ""
    return tuple(prefix + shard for shard in SHARDS_OF_FUSED.get(child_name, (child_name,)))


def _suffixes(method: str) -> tuple[str, ...]:
    if method == "awq":
        return awq_format.TENSOR_SUFFIXES
    if method == "gptq":
        return gptq_format.TENSOR_SUFFIXES
    if method == "fp8":
        return hf_fp8_format.TENSOR_SUFFIXES
    return compressed_tensors_format.TENSOR_SUFFIXES
