"""`WeightScheme`: how one group of a checkpoint's linear weights is quantized and stored.

Every supported method (compressed-tensors, AWQ, GPTQ, transformers' FP8) is read into
this one value, so the tensor readers and the layer builder switch on a few named fields,
never on the method's own config keys.
"""

from __future__ import annotations

from dataclasses import dataclass

INT_FORMATS = ("pack-quantized", "int-quantized", "naive-quantized")
"""compressed-tensors formats of integer weights llmd reads."""
FLOAT_FORMATS = ("float-quantized", "naive-quantized")
"""compressed-tensors formats of fp8 weights llmd reads."""
STRATEGIES = ("tensor", "channel", "group", "block")
"""How scales are shared: one per tensor, per output row, per row and group of columns,
or per 2-D block."""


@dataclass(frozen=True)
class WeightScheme:
    """One quantization scheme of linear weights, with the on-disk format it is read from."""

    method: str
    """"compressed-tensors", "awq", "gptq" or "fp8" (transformers' own format)."""
    format: str
    """The tensor layout: a compressed-tensors format name, "awq-gemm", "gptq" or "fp8"."""
    num_bits: int
    is_float: bool = False
    """fp8 (e4m3) weights rather than integers."""
    strategy: str = "channel"
    """One of STRATEGIES."""
    group_size: int | None = None
    """Columns per scale for the "group" strategy (None: the whole row)."""
    block_structure: tuple[int, int] | None = None
    """(rows, columns) per scale for the "block" strategy."""
    is_symmetric: bool = True
    """No zero point: the stored codes are centred on zero."""
    quantizes_activations: bool = False
    """The checkpoint also quantizes each linear's input (W8A8): llmd's CPU kernels are
    weight-only, so activations stay in the model's dtype there."""
    gptq_zero_offset: int = 0
    """GPTQ's v1 format stores each zero point minus one (1), v2 stores it as is (0)."""

    @property
    def name(self) -> str:
        """A short name for logs and status: e.g. "w4a16-g128", "w8a16", "fp8-block128x128"."""
        if self.is_float:
            block = "x".join(map(str, self.block_structure or ()))
            return "fp8" if self.strategy == "tensor" else f"fp8-{self.strategy}{block}"
        activations = "a8" if self.quantizes_activations else "a16"
        group = f"-g{self.group_size}" if self.strategy == "group" else ""
        return f"w{self.num_bits}{activations}{group}"
