"""Decode CUDA graphs: buckets, plan eligibility, padded static buffers, and (on a GPU) replay.

Everything but the capture itself runs on CPU: padded decode batches written into static
buffers go through the Triton kernels in the interpreter and must equal the unpadded eager
step, with padding rows leaving the KV cache untouched. The `cuda` tests compare graph
replay with eager execution and HF on a real device.
"""

from __future__ import annotations

import copy
import itertools

import pytest
import torch

from llmd.attention.torch_backend import TorchAttentionBackend
from llmd.engine.plan_writer import PlanWriter
from llmd.engine.request import Request
from llmd.engine.scheduler_output import SchedulerOutput
from llmd.errors import InvalidParameterError
from llmd.layers.kernel_config import KernelConfig, configure_kernels
from llmd.models.loader import load_hf_config, load_model, model_shape
from llmd.runner.cuda_graphs import (
    MAX_GRAPH_BATCH_SIZE,
    bucket_for,
    estimate_graph_pool_bytes,
    graph_batch_size_for,
    graph_batch_sizes,
    graphs_disabled_reason,
)
from llmd.runner.input_batch import (
    PADDING_SLOT,
    DecodeBuffers,
    build_decode_batch,
    build_input_batch,
)
from llmd.sampling_params import SamplingParams
from tests.checkpoints import make_tiny_checkpoint
from tests.kernels.triton_env import HAS_TRITON, enable_interpreter_without_cuda
from tests.kernels.triton_env import skip_unless_runnable as skip_unless_triton_runs
from tests.tiny_model import make_tiny_model

enable_interpreter_without_cuda()  # before llmd.kernels modules are imported (lazily)

BLOCK_SIZE = 4
CPU = torch.device("cpu")


def _request(prompt: list[int], block_ids: list[int], num_computed: int = 0) -> Request:
    request = Request(f"r{len(prompt)}-{block_ids[0]}", prompt, SamplingParams(max_tokens=8))
    request.block_ids = list(block_ids)
    request.num_computed_tokens = num_computed
    return request


def _decode_plan(requests: list[Request]) -> SchedulerOutput:
    """One decode chunk per request (its next token is already appended), all new to the runner."""
    return PlanWriter().plan([(request, 1, True) for request in requests])


def _decoding_requests() -> list[Request]:
    """Three requests one token past their prompts, on scattered blocks."""
    specs = [([5, 6, 7, 8, 9], [3, 0]), (list(range(20, 29)), [5, 1, 7]), ([11, 12], [2])]
    requests = []
    for prompt, block_ids in specs:
        request = _request(prompt + [40 + len(prompt)], block_ids, num_computed=len(prompt))
        request.num_prompt_tokens = len(prompt)
        requests.append(request)
    return requests


# ---------------------------------------------------------------- buckets and eligibility


def test_batch_sizes_are_powers_then_steps_of_eight_ending_at_the_limit():
    sizes = graph_batch_sizes(max_num_seqs=256, max_num_batched_tokens=2048)
    assert sizes[:6] == [1, 2, 4, 8, 16, 24] and sizes[-1] == 256
    assert all(b - a == 8 for a, b in itertools.pairwise(sizes[3:]))
    assert graph_batch_sizes(100, 2048)[-2:] == [96, 100]
    assert graph_batch_sizes(3, 2048) == [1, 2, 3]
    assert graph_batch_sizes(1, 2048) == [1]
    assert graph_batch_sizes(256, 20)[-2:] == [16, 20]  # a decode costs one budget token
    assert graph_batch_sizes(4096, 8192)[-1] == MAX_GRAPH_BATCH_SIZE


def test_bucket_is_the_smallest_that_fits():
    sizes = [1, 2, 4, 8, 16]
    assert [bucket_for(n, sizes) for n in (1, 2, 3, 5, 8, 9, 16)] == [1, 2, 4, 8, 8, 16, 16]
    assert bucket_for(17, sizes) is None


def test_only_decode_only_plans_that_fit_use_graphs():
    sizes = [1, 2, 4]
    requests = _decoding_requests()
    assert graph_batch_size_for(_decode_plan(requests), sizes, max_blocks_per_seq=3) == 4
    assert graph_batch_size_for(_decode_plan(requests[:2]), sizes, 3) == 2
    assert graph_batch_size_for(_decode_plan(requests), sizes, 2) is None  # table too wide
    assert graph_batch_size_for(_decode_plan(requests * 2), sizes, 3) is None  # 6 > 4
    assert graph_batch_size_for(SchedulerOutput(), sizes, 3) is None
    prefill = _request([1, 2, 3], [4])
    mixed = PlanWriter().plan([(requests[0], 1, True), (prefill, 3, True)])
    assert graph_batch_size_for(mixed, sizes, 3) is None
    # A one-token chunk that does not sample (a prefill cut by the budget) is no decode.
    not_sampling = PlanWriter().plan([(prefill, 1, False)])
    assert graph_batch_size_for(not_sampling, sizes, 3) is None


def test_graphs_need_cuda_a_graph_safe_backend_and_no_enforce_eager():
    cuda = torch.device("cuda")
    torch_backend, triton_backend = TorchAttentionBackend(), TorchAttentionBackend()
    triton_backend.supports_cuda_graphs = True  # what the triton backend declares
    assert "CUDA device" in graphs_disabled_reason(CPU, triton_backend, enforce_eager=False)
    assert "enforce_eager" in graphs_disabled_reason(cuda, triton_backend, enforce_eager=True)
    reason = graphs_disabled_reason(cuda, torch_backend, False)
    assert "the torch attention backend" in reason and "attention_backend=triton" in reason
    assert graphs_disabled_reason(cuda, triton_backend, enforce_eager=False) is None


def test_graph_reserve_scales_the_profiled_forward_to_the_largest_bucket():
    reserve = estimate_graph_pool_bytes(2048e6, 2048, [1, 2, 4, 256])
    assert reserve >= 256e6
    assert reserve < estimate_graph_pool_bytes(2048e6, 2048, [1, 2, 4, 512])


# ---------------------------------------------------------------- static buffers


def test_decode_batch_matches_eager_batch_and_pads_rows():
    requests = _decoding_requests()
    plan = _decode_plan(requests)
    eager = build_input_batch(plan, BLOCK_SIZE, CPU)
    buffers = DecodeBuffers.allocate(8, max_blocks_per_seq=16, device=CPU)
    buffers.block_tables.fill_(99)  # stale ids from earlier steps
    padded = build_decode_batch(plan, BLOCK_SIZE, buffers, num_padded_seqs=4)

    assert padded.input_ids.data_ptr() == buffers.token_rows.data_ptr()  # views, not copies
    assert padded.input_ids[:3].tolist() == eager.input_ids.tolist() == [45, 49, 42]
    assert padded.positions[:3].tolist() == eager.positions.tolist() == [5, 9, 2]
    meta, eager_meta = padded.metadata, eager.metadata
    assert meta.slot_mapping[:3].tolist() == eager_meta.slot_mapping.tolist()
    assert meta.seq_lens[:3].tolist() == eager_meta.seq_lens.tolist() == [6, 10, 3]
    assert torch.equal(meta.block_tables[:3, :3], eager_meta.block_tables)
    assert meta.block_tables.shape == (4, 16)  # fixed width: graphs see one shape
    # The padding row stores nothing and attends to nothing.
    assert padded.input_ids[3] == 0 and padded.positions[3] == 0
    assert meta.slot_mapping[3] == PADDING_SLOT and meta.seq_lens[3] == 0
    assert (meta.num_decode_seqs, meta.num_prefill_seqs, meta.num_tokens) == (4, 0, 4)
    assert meta.query_start_loc.tolist() == [0, 1, 2, 3, 4]
    assert meta.seq_lens_cpu == [6, 10, 3, 0] and meta.max_seq_len == 10
    assert padded.logits_indices.tolist() == [0, 1, 2]
    assert padded.sampling_request_indices == eager.sampling_request_indices == [0, 1, 2]

    # A smaller step afterwards reuses the same rows; only its own rows matter.
    smaller = build_decode_batch(_decode_plan(requests[2:]), BLOCK_SIZE, buffers, 1)
    assert smaller.input_ids.tolist() == [42] and smaller.metadata.seq_lens.tolist() == [3]
    padding = buffers.padding_batch(8)
    assert padding.metadata.slot_mapping.tolist() == [PADDING_SLOT] * 8
    assert padding.metadata.seq_lens.tolist() == [0] * 8 and padding.logits_indices.numel() == 0


def test_decode_batch_rejects_what_the_buffers_cannot_hold():
    requests = _decoding_requests()
    buffers = DecodeBuffers.allocate(4, max_blocks_per_seq=2, device=CPU)
    with pytest.raises(InvalidParameterError):
        build_decode_batch(_decode_plan(requests), BLOCK_SIZE, buffers, 4)  # 3 blocks > 2
    with pytest.raises(InvalidParameterError):
        build_decode_batch(_decode_plan(requests[:1]), BLOCK_SIZE, buffers, 8)  # 8 rows > 4
    prefill = PlanWriter().plan([(_request([1, 2], [0]), 2, True)])
    with pytest.raises(InvalidParameterError):
        build_decode_batch(prefill, BLOCK_SIZE, buffers, 1)


# ---------------------------------------------------------------- padded rows through kernels


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return make_tiny_checkpoint("llama", tmp_path_factory.mktemp("graph-llama"))


def _nan_caches(shape, num_blocks: int, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    cache_shape = (num_blocks, BLOCK_SIZE, shape.num_kv_heads, shape.head_dim)
    return [
        (
            torch.full(cache_shape, float("nan"), device=device),
            torch.full(cache_shape, float("nan"), device=device),
        )
        for _ in range(shape.num_layers)
    ]


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
def test_padded_decode_through_triton_kernels_equals_the_unpadded_step(llama_dir):
    """What a graph replays (padded rows, wide tables) computes exactly the eager step."""
    skip_unless_triton_runs("cpu")
    from llmd.attention.triton_backend import TritonAttentionBackend

    hf_config = load_hf_config(llama_dir)
    shape = model_shape(hf_config)
    model = load_model(llama_dir, hf_config, TritonAttentionBackend(), torch.float32, CPU)
    configure_kernels(model, KernelConfig(use_triton=True))  # as on CUDA
    requests = _decoding_requests()
    kv_caches = _nan_caches(shape, num_blocks=8, device=CPU)
    for request in requests:  # prefill each prompt so the decodes have a context
        request.num_computed_tokens = 0
        prompt_plan = PlanWriter().plan([(request, request.num_prompt_tokens, True)])
        batch = build_input_batch(prompt_plan, BLOCK_SIZE, CPU)
        with torch.inference_mode():
            model(batch.input_ids, batch.positions, kv_caches, batch.metadata)
        request.num_computed_tokens = request.num_prompt_tokens
    plan = _decode_plan(requests)

    eager_caches = copy.deepcopy(kv_caches)
    eager = build_input_batch(plan, BLOCK_SIZE, CPU)
    buffers = DecodeBuffers.allocate(8, max_blocks_per_seq=64, device=CPU)
    with torch.inference_mode():
        expected = model(eager.input_ids, eager.positions, eager_caches, eager.metadata)
        for num_padded in (4, 8):
            padded_caches = copy.deepcopy(kv_caches)
            batch = build_decode_batch(plan, BLOCK_SIZE, buffers, num_padded)
            hidden = model(batch.input_ids, batch.positions, padded_caches, batch.metadata)
            assert hidden.shape[0] == num_padded
            torch.testing.assert_close(hidden[:3], expected, atol=1e-5, rtol=1e-5)
            assert torch.isfinite(hidden).all()
            for (k, v), (k_eager, v_eager) in zip(padded_caches, eager_caches, strict=True):
                # Same slots written (NaN stays NaN: the padding rows stored nothing).
                torch.testing.assert_close(k, k_eager, equal_nan=True, atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(v, v_eager, equal_nan=True, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("num_splits", [1, 2])
def test_decode_kernel_writes_zeros_for_empty_contexts(num_splits):
    skip_unless_triton_runs("cpu")
    from llmd.kernels.decode_attention import decode_attention, decode_attention_reference

    generator = torch.Generator().manual_seed(0)
    k_cache = torch.randn(6, BLOCK_SIZE, 2, 32, generator=generator)
    v_cache = torch.randn(6, BLOCK_SIZE, 2, 32, generator=generator)
    query = torch.randn(4, 4, 32, generator=generator)
    block_tables = torch.tensor([[1, 4, 0, 0], [0, 0, 0, 0], [2, 3, 5, 0], [0, 0, 0, 0]])
    seq_lens = torch.tensor([7, 0, 9, 0], dtype=torch.int32)
    args = (query, k_cache, v_cache, block_tables.int(), seq_lens, 32**-0.5)
    out = torch.full_like(query, float("nan"))
    decode_attention(*args, out=out, num_splits=num_splits)
    assert (out[[1, 3]] == 0).all()
    torch.testing.assert_close(out, decode_attention_reference(*args), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- on a GPU


def _hf_greedy(path, prompts, max_new_tokens):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    outputs = []
    with torch.no_grad():
        for prompt in prompts:
            generated = model.generate(
                torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0,
            )  # fmt: skip
            outputs.append(generated[0, len(prompt) :].tolist())
    return outputs


def _cuda_llm(path, **options):
    from llmd import LLM

    return LLM(
        str(path), device="cuda", dtype="float32", block_size=BLOCK_SIZE, max_num_seqs=16,
        **options,
    )  # fmt: skip


GPU_PROMPTS = [[(7 * i + j) % 300 + 3 for j in range(n)] for i, n in enumerate([3, 9, 1, 17, 40])]
GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


def _skip_without_cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")


@pytest.mark.cuda
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_graph_replay_greedy_equals_eager_and_hf(tmp_path, arch):
    _skip_without_cuda()
    path = make_tiny_model(tmp_path / arch, arch)
    graphs = _cuda_llm(path, num_blocks=128, attention_backend="triton")
    runner = graphs.engine.runner
    assert runner.graph_runner is not None and runner.kernel_config.use_triton
    assert runner.graph_batch_sizes == [1, 2, 4, 8, 16]
    with_graphs = [out.token_ids for out in graphs.generate(GPU_PROMPTS, GREEDY)]
    # 5 requests, then fewer as prompts finish prefilling: padded buckets 8, 4, 2, 1.
    assert runner.graph_runner.num_replays > 0
    alone = [out.token_ids for out in graphs.generate(GPU_PROMPTS[:1], GREEDY)]
    del graphs, runner
    eager = _cuda_llm(path, num_blocks=128, attention_backend="triton", enforce_eager=True)
    assert eager.engine.runner.graph_runner is None
    assert [out.token_ids for out in eager.generate(GPU_PROMPTS, GREEDY)] == with_graphs
    assert alone == with_graphs[:1]
    assert with_graphs == _hf_greedy(path, GPU_PROMPTS, GREEDY.max_tokens)


@pytest.mark.cuda
def test_kv_profiling_sizes_a_positive_number_of_blocks(llama_dir):
    _skip_without_cuda()
    from llmd.config import EngineConfig
    from llmd.runner.model_runner import ModelRunner

    # The runner alone: a tiny model on a large GPU gets millions of blocks, too many for a
    # block manager in a test, but allocating their tensors is quick.
    config = EngineConfig(
        model=str(llama_dir), device="cuda", gpu_memory_utilization=0.3, block_size=64,
        max_num_seqs=16, attention_backend="triton",
    )  # fmt: skip
    hf_config = load_hf_config(llama_dir)
    runner = ModelRunner(config, llama_dir, hf_config, model_shape(hf_config), 256, 256)
    assert runner.num_blocks > 0 and runner.graph_reserve_bytes > 0
    assert runner.graph_runner is not None
    assert runner.graph_runner.buffers.max_blocks_per_seq == 4  # ceil(256 / 64)
    kv_bytes = runner.num_blocks * runner.bytes_per_block
    total_bytes = torch.cuda.get_device_properties(runner.device).total_memory
    assert kv_bytes < 0.3 * total_bytes


@pytest.mark.cuda
def test_torch_backend_on_cuda_runs_eagerly_with_torch_layers(tiny_model_dir):
    _skip_without_cuda()
    llm = _cuda_llm(tiny_model_dir, num_blocks=128, attention_backend="torch")
    runner = llm.engine.runner
    assert runner.graph_runner is None and runner.graph_batch_sizes == []
    assert not runner.kernel_config.use_triton
    assert isinstance(runner.backend, TorchAttentionBackend)
    expected = _hf_greedy(tiny_model_dir, GPU_PROMPTS, GREEDY.max_tokens)
    assert [out.token_ids for out in llm.generate(GPU_PROMPTS, GREEDY)] == expected
