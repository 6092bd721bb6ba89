"""Engine configuration: frozen, documented, validated dataclasses.

`EngineConfig` is what users set (CLI flags and `LLM(**kwargs)` map onto it one to one);
`SchedulerConfig` is the resolved subset the torch-free control plane needs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from llmd.errors import InvalidParameterError, require

DTYPES = ("auto", "float32", "bfloat16", "float16")
KV_CACHE_DTYPES = ("auto", "float32", "bfloat16", "fp8", "fp8_e4m3")
QUANTIZATIONS = ("auto", "compressed-tensors", "awq", "gptq", "fp8", "dequantize")
DEVICES = ("auto", "cpu", "cuda")
POLICIES = ("fcfs", "priority")
ATTENTION_BACKENDS = ("auto", "cpu", "torch", "triton")
SPECULATIVE_METHODS = ("ngram", "draft")
MAX_SPECULATIVE_TOKENS = 16
"""Most draft tokens one verify step scores per request: beyond, acceptance is negligible."""


@dataclass(frozen=True)
class EngineConfig:
    """Everything that shapes one engine instance; validated when constructed."""

    model: str | None = None
    """Local HF directory or hub id; None means the default model shipped with llmd."""
    tokenizer: str | None = None
    """Tokenizer directory or hub id; None means the model's."""
    served_model_name: str | None = None
    """The model's name to clients (HTTP `model` and /v1/models, status, metrics, top);
    None means `model` as given (a path or hub id), or llmd-default."""
    dtype: str = "auto"
    """Weights and activations: auto (bf16 on CUDA and on CPUs with AVX512_BF16 or AMX, fp32
    on other CPUs), float32, bfloat16, float16."""
    device: str = "auto"
    """auto (cuda when available), cpu or cuda."""
    kv_cache_dtype: str = "auto"
    """KV cache element type: auto (the model's dtype), float32, bfloat16, or fp8 (fp8_e4m3:
    e4m3 with the checkpoint's k/v scales, else 1.0). Another type than the model's needs
    the cpu attention backend: bfloat16 under float32 activations halves the bytes decode
    attention reads, fp8 halves bf16's (K/V quantized by the op, saturating at +-448);
    attention still computes in float32."""
    quantization: str = "auto"
    """Weight quantization: auto (what the checkpoint's quantization_config says), a method
    the checkpoint must then have (compressed-tensors, awq, gptq, fp8: transformers' own
    FP8 format), or dequantize (read the quantized weights, then run every linear dense in
    the model's dtype)."""
    block_size: int = 16
    """Tokens per KV-cache block (the paging granularity)."""
    kv_cache_memory_gib: float = 1.0
    """On CPU: GiB of memory given to the KV cache (ignored when num_blocks is set)."""
    gpu_memory_utilization: float = 0.9
    """On CUDA: fraction of the GPU memory free at start-up that llmd may use for weights,
    activations, CUDA graphs and the KV cache (the KV cache gets what the others leave)."""
    num_blocks: int | None = None
    """Explicit number of KV blocks; overrides the memory budget."""
    max_model_len: int | None = None
    """Longest prompt plus output in tokens; None means the model's maximum."""
    max_num_seqs: int | None = None
    """Most requests in one step's batch; None: the device's default for the usage
    (llmd/batch_limits.py: 256 offline; 64 served on CPU)."""
    max_num_batched_tokens: int | None = None
    """Token budget of one step (prefill chunks plus decode tokens); None: the device's
    default for the usage (llmd/batch_limits.py: 2048)."""
    enable_prefix_caching: bool = True
    """Reuse KV blocks of identical prompt prefixes across requests."""
    enable_chunked_prefill: bool = True
    """Split long prompts across steps so decodes keep flowing; off: whole prompts only."""
    scheduling_policy: str = "fcfs"
    """fcfs (arrival order) or priority (lower value first, then arrival)."""
    seed: int = 0
    """Seed of the engine's random state (requests without their own seed use it)."""
    attention_backend: str = "auto"
    """auto (triton on CUDA, cpu on CPU), cpu (C++ op; torch if it cannot be built), torch
    or triton."""
    enforce_eager: bool = False
    """Disable CUDA graphs for decode steps."""
    async_scheduling: bool | None = None
    """Schedule and prepare step N+1 while step N runs (outputs lag one step, no token past
    a stop); None means on for CUDA, off on CPU (where it works too, but gains nothing)."""
    num_threads: int | None = None
    """Intra-op threads of the forward pass on CPU, set once at start-up; None: the cores
    this process may use ($OMP_NUM_THREADS when set)."""
    prepack_weights: bool = True
    """On CPU, repack linear weights once into oneDNN's blocked GEMM layout (torch's stock
    GEMM repacks them every call: 1.2-2.5x slower at decode's batch sizes). Row counts are
    padded to 22 buckets whose oneDNN primitives are built at load, so memory stays flat."""
    speculative_method: str | None = None
    """Speculative decoding: ngram (prompt lookup: drafts copied from where the last tokens
    occurred before, in the prompt or the output) or draft (a small model's greedy guesses,
    see draft_model), verified k at a time in one forward pass with the same output as
    without it; None: off. With async scheduling, the step in flight is applied before a
    step that drafts (the drafts need its samples); plain decodes still pipeline."""
    num_speculative_tokens: int = 3
    """Draft tokens proposed and verified per request and step (speculative decoding)."""
    prompt_lookup_min: int = 2
    """Shortest suffix of a request's tokens the ngram proposer looks up."""
    prompt_lookup_max: int = 4
    """Longest suffix the ngram proposer looks up (longer matches are tried first)."""
    speculative_max_batch_size: int | None = None
    """Speculative decoding drafts only in steps with at most this many running requests;
    None: at any batch. Verify steps of a large batch are compute-bound (n-gram drafts at
    32 streams cost 8% of the output rate on a 2-core CPU, docs/benchmarks.md)."""
    draft_model: str | None = None
    """Speculative decoding's draft model (method draft): a local HF directory or hub id of
    a small model with the target's tokenizer (the same vocabulary size), run on the same
    device with its own KV cache, guessing num_speculative_tokens tokens greedily per step."""
    skip_tokenizer_init: bool = False
    """Load no tokenizer: prompts must be token ids and no text is produced (benchmarks)."""
    trust_remote_code: bool = False
    """Never executes remote code; kept so configs copied from HF tools fail clearly."""

    def __post_init__(self) -> None:
        require(self.dtype in DTYPES, "dtype", f"must be one of {', '.join(DTYPES)}")
        if self.served_model_name is not None:
            name = self.served_model_name
            is_clean = isinstance(name, str) and bool(name) and name == name.strip()
            require(is_clean, "served_model_name", f"must be a non-empty name, got {name!r}")
        require(self.device in DEVICES, "device", f"must be one of {', '.join(DEVICES)}")
        require(
            self.kv_cache_dtype in KV_CACHE_DTYPES,
            "kv_cache_dtype",
            f"must be one of {', '.join(KV_CACHE_DTYPES)}",
        )
        require(
            self.quantization in QUANTIZATIONS,
            "quantization",
            f"must be one of {', '.join(QUANTIZATIONS)}",
        )
        _positive_int("block_size", self.block_size)
        require(self.block_size <= 256, "block_size", "must be <= 256")
        if self.num_threads is not None:
            _positive_int("num_threads", self.num_threads)
        require(self.kv_cache_memory_gib > 0, "kv_cache_memory_gib", "must be > 0")
        require(
            0 < self.gpu_memory_utilization <= 1,
            "gpu_memory_utilization",
            "must be in (0, 1]",
        )
        if self.num_blocks is not None:
            _positive_int("num_blocks", self.num_blocks)
        if self.max_model_len is not None:
            _positive_int("max_model_len", self.max_model_len)
        if self.max_num_seqs is not None:
            _positive_int("max_num_seqs", self.max_num_seqs)
        if self.max_num_batched_tokens is not None:
            _positive_int("max_num_batched_tokens", self.max_num_batched_tokens)
        require(
            self.scheduling_policy in POLICIES,
            "scheduling_policy",
            f"must be one of {', '.join(POLICIES)}",
        )
        require(
            self.attention_backend in ATTENTION_BACKENDS,
            "attention_backend",
            f"must be one of {', '.join(ATTENTION_BACKENDS)}",
        )
        require(
            self.async_scheduling in (None, True, False),
            "async_scheduling",
            f"must be true, false or null (auto), got {self.async_scheduling!r}",
        )
        self._check_speculation()
        require(not self.trust_remote_code, "trust_remote_code", "llmd never runs remote code")

    def _check_speculation(self) -> None:
        """The speculative-decoding fields: a known method (draft with its model, no model
        otherwise), counts in range, min <= max."""
        method = self.speculative_method
        require(
            method is None or method in SPECULATIVE_METHODS,
            "speculative_method",
            f"must be one of {', '.join(SPECULATIVE_METHODS)} (or unset), got {method!r}",
        )
        if method == "draft":
            require(
                isinstance(self.draft_model, str) and bool(self.draft_model),
                "draft_model",
                "speculative_method draft needs the draft model's directory or hub id",
            )
        else:
            require(
                self.draft_model is None,
                "draft_model",
                f"is used only with speculative_method draft (it is {method!r})",
            )
        _positive_int("num_speculative_tokens", self.num_speculative_tokens)
        require(
            self.num_speculative_tokens <= MAX_SPECULATIVE_TOKENS,
            "num_speculative_tokens",
            f"must be <= {MAX_SPECULATIVE_TOKENS}, got {self.num_speculative_tokens}",
        )
        if self.speculative_max_batch_size is not None:
            _positive_int("speculative_max_batch_size", self.speculative_max_batch_size)
        _positive_int("prompt_lookup_min", self.prompt_lookup_min)
        _positive_int("prompt_lookup_max", self.prompt_lookup_max)
        require(
            self.prompt_lookup_min <= self.prompt_lookup_max,
            "prompt_lookup_min",
            f"must be <= prompt_lookup_max ({self.prompt_lookup_min} > {self.prompt_lookup_max})",
        )

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> EngineConfig:
        """Build from keyword arguments, naming any unknown one in a typed error."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise InvalidParameterError(
                f"unknown engine option(s): {', '.join(unknown)}", unknown[0]
            )
        return cls(**kwargs)


@dataclass(frozen=True)
class SchedulerConfig:
    """The resolved limits the scheduler enforces each step."""

    max_num_seqs: int
    """Most requests in one step's batch."""
    max_num_batched_tokens: int
    """Token budget of one step."""
    max_model_len: int
    """Longest prompt plus output in tokens."""
    enable_chunked_prefill: bool = True
    """Split prompts across steps; off: a prompt is scheduled whole or not at all."""
    policy: str = "fcfs"
    """fcfs or priority."""

    @classmethod
    def resolve(cls, config: EngineConfig, max_model_len: int) -> SchedulerConfig:
        """`config`'s limits for a model served up to `max_model_len` tokens; without chunked
        prefill a whole prompt is one chunk, so the token budget grows to hold the longest."""
        budget = config.max_num_batched_tokens
        if not config.enable_chunked_prefill:
            budget = max(budget, max_model_len)
        return cls(
            config.max_num_seqs, budget, max_model_len, config.enable_chunked_prefill,
            config.scheduling_policy,
        )  # fmt: skip

    def __post_init__(self) -> None:
        _positive_int("max_num_seqs", self.max_num_seqs)
        _positive_int("max_num_batched_tokens", self.max_num_batched_tokens)
        _positive_int("max_model_len", self.max_model_len)
        require(self.policy in POLICIES, "scheduling_policy", f"must be one of {POLICIES}")
        if not self.enable_chunked_prefill:
            require(
                self.max_num_batched_tokens >= self.max_model_len,
                "max_num_batched_tokens",
                "must be >= max_model_len when chunked prefill is disabled "
                f"({self.max_num_batched_tokens} < {self.max_model_len})",
            )


def _positive_int(name: str, value: Any) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    require(ok, name, f"must be a positive integer, got {value!r}")


def default_model_dir() -> str:
    """The small model shipped inside the package, used when no model is given."""
    from pathlib import Path

    return str(Path(__file__).resolve().parent / "default_model")
