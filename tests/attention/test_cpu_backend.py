"""The C++ CPU paged-attention backend against the naive per-token reference.

Cases are built in the reference's token-major layout with NaN in every slot no context
uses, then converted to the CPU layout, so reading a wrong block, a padded slot past a
context or a masked position shows up as a mismatch or a NaN.
"""

from __future__ import annotations

import pytest
import torch

from llmd.attention.cpu_backend import CpuAttentionBackend
from llmd.attention.cpu_extension import load_cpu_ops, load_paged_attention_op
from llmd.attention.factory import create_attention_backend
from llmd.attention.inputs import AttentionInputs
from llmd.attention.reference import build_metadata, naive_paged_attention

# (query_lens, seq_lens, num_decode_seqs): decodes first, then prefill chunks. Chunks
# longer than the op's 8-row tiles, over cached prefixes and whole prompts.
BATCHES = {
    "decodes": ([1, 1, 1, 1, 1, 1], [1, 4, 5, 16, 17, 40], 6),
    "prefills": ([19, 7, 1, 9], [19, 30, 9, 9], 0),
    "mixed": ([1, 1, 1, 12, 3, 8, 1], [1, 23, 12, 12, 20, 33, 6], 3),
    # Several 32-token chunks of the tile path, cached prefixes, an odd block count and
    # tails of 1-3 rows (which the tile path leaves to the vector one).
    "long": ([1, 40, 100, 5, 19, 3], [60, 70, 100, 37, 51, 83], 1),
}


@pytest.fixture
def vector_path():
    """Switches the AMX tile path off for one test (bf16 prefill rows then take the vector
    path, as on a CPU without tiles); restores the default. Skips where no tiles run, as
    the default path is the vector one there."""
    ops = load_cpu_ops()
    if not ops.set_amx_enabled(True):
        pytest.skip("no AMX-BF16 tiles on this CPU: the default path is the vector one")
    ops.set_amx_enabled(False)
    try:
        yield
    finally:
        ops.set_amx_enabled(True)


@pytest.fixture(scope="module")
def backend():
    """One backend per module: the op is built (or loaded from the cache) once."""
    return CpuAttentionBackend()


def to_cpu_layout(k_cache, v_cache):
    """Token-major [blocks, block_size, kv_heads, dim] caches in the CPU backend's layout."""
    return k_cache.permute(0, 2, 3, 1).contiguous(), v_cache.permute(0, 2, 1, 3).contiguous()


def make_case(batch, block_size, num_heads, num_kv_heads, head_dim, dtype):
    """Metadata, strided q/k/v and NaN token-major caches holding every cached prefix."""
    query_lens, seq_lens, num_decode_seqs = BATCHES[batch]
    generator = torch.Generator().manual_seed(block_size * 100 + head_dim)
    num_blocks = sum(-(-n // block_size) for n in seq_lens) + 3  # spare blocks stay NaN
    metadata, block_ids_per_seq = build_metadata(
        query_lens, seq_lens, block_size, num_blocks, generator=generator,
        num_decode_seqs=num_decode_seqs,
    )  # fmt: skip
    qkv = torch.randn(sum(query_lens), num_heads + 2 * num_kv_heads, head_dim, generator=generator)
    qkv = qkv.to(dtype)
    query = qkv[:, :num_heads]
    key = qkv[:, num_heads : num_heads + num_kv_heads]
    value = qkv[:, num_heads + num_kv_heads :]
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype)
    v_cache = torch.full(shape, float("nan"), dtype=dtype)
    cached_slots = [
        block_ids[position // block_size] * block_size + position % block_size
        for query_len, seq_len, block_ids in zip(query_lens, seq_lens, block_ids_per_seq)
        for position in range(seq_len - query_len)
    ]
    for cache in (k_cache, v_cache):
        values = torch.randn(len(cached_slots), num_kv_heads, head_dim, generator=generator)
        cache.view(-1, num_kv_heads, head_dim)[cached_slots] = values.to(dtype)
    return metadata, query, key, value, k_cache, v_cache


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("block_size", "num_heads", "num_kv_heads", "head_dim"),
    [(16, 9, 3, 64), (16, 8, 2, 128), (4, 4, 4, 16), (1, 8, 2, 16), (7, 6, 2, 128), (32, 4, 1, 24)],
)
@pytest.mark.parametrize("batch", list(BATCHES))
def test_matches_reference(backend, batch, block_size, num_heads, num_kv_heads, head_dim, dtype):
    """The default path of this CPU: the tile path for bf16 prefill rows where AMX runs."""
    check_against_reference(backend, batch, block_size, num_heads, num_kv_heads, head_dim, dtype)


@pytest.mark.parametrize(("num_heads", "num_kv_heads", "head_dim"), [(9, 3, 64), (8, 2, 128)])
@pytest.mark.parametrize("batch", list(BATCHES))
def test_vector_path_matches_reference_where_tiles_run(
    backend, vector_path, batch, num_heads, num_kv_heads, head_dim
):
    """The bf16 shapes the tile path takes, on the vector path a CPU without AMX runs."""
    check_against_reference(backend, batch, 16, num_heads, num_kv_heads, head_dim, torch.bfloat16)


def check_against_reference(backend, batch, block_size, num_heads, num_kv_heads, head_dim, dtype):
    """The op's store and output against the naive reference on one case."""
    metadata, query, key, value, k_cache, v_cache = make_case(
        batch, block_size, num_heads, num_kv_heads, head_dim, dtype
    )
    k_cpu, v_cpu = to_cpu_layout(k_cache, v_cache)
    scale = head_dim**-0.5

    out = backend.forward(AttentionInputs(query, key, value, k_cpu, v_cpu, metadata, scale))

    # The store wrote exactly this step's slots: the reference's caches after the same store.
    for cache, new in ((k_cache, key), (v_cache, value)):
        cache.view(-1, num_kv_heads, head_dim).index_copy_(0, metadata.slot_mapping, new)
    expected_k, expected_v = to_cpu_layout(k_cache, v_cache)
    torch.testing.assert_close(k_cpu, expected_k, atol=0, rtol=0, equal_nan=True)
    torch.testing.assert_close(v_cpu, expected_v, atol=0, rtol=0, equal_nan=True)

    assert out.shape == query.shape and out.dtype == dtype
    assert not out.isnan().any()
    expected = naive_paged_attention(
        query.float(), k_cache.float(), v_cache.float(), metadata, scale
    )
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2  # bf16: the output's own rounding
    torch.testing.assert_close(out.float(), expected, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("batch", list(BATCHES))
def test_float32_activations_over_a_bfloat16_cache(backend, batch):
    """kv_cache_dtype=bfloat16 under fp32 activations: K/V stored rounded, math in fp32."""
    metadata, query, key, value, k_cache, v_cache = make_case(
        batch, 16, 9, 3, 64, torch.float32
    )  # float32 q/k/v; the caches become bf16 below
    k_cache, v_cache = k_cache.to(torch.bfloat16), v_cache.to(torch.bfloat16)
    k_cpu, v_cpu = to_cpu_layout(k_cache, v_cache)

    out = backend.forward(AttentionInputs(query, key, value, k_cpu, v_cpu, metadata, 0.125))

    for cache, new in ((k_cache, key), (v_cache, value)):  # the store rounds to bf16
        cache.view(-1, 3, 64).index_copy_(0, metadata.slot_mapping, new.to(torch.bfloat16))
    expected_k, expected_v = to_cpu_layout(k_cache, v_cache)
    torch.testing.assert_close(k_cpu, expected_k, atol=0, rtol=0, equal_nan=True)
    torch.testing.assert_close(v_cpu, expected_v, atol=0, rtol=0, equal_nan=True)
    assert out.dtype == torch.float32 and not out.isnan().any()
    expected = naive_paged_attention(query, k_cache.float(), v_cache.float(), metadata, 0.125)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)  # fp32 math throughout


@pytest.mark.parametrize("batch", list(BATCHES))
def test_bfloat16_queries_are_read_and_written_by_the_op_itself(batch):
    """A bf16 model's queries go into the op as they are and its output is rounded once
    inside: bit for bit what fp32 math on the same values, rounded at the end, gives.
    (On the vector path; the tile path rounds probabilities to bf16, see below.)"""
    ops = load_cpu_ops()
    ops.set_amx_enabled(False)
    try:
        check_bfloat16_queries(batch)
    finally:
        ops.set_amx_enabled(True)


def check_bfloat16_queries(batch):
    """The bit-exact contract of bf16 queries on one case (the vector path)."""
    metadata, query, key, value, k_cache, v_cache = make_case(batch, 16, 9, 3, 64, torch.bfloat16)
    op = load_paged_attention_op()  # the raw op, to pin its dtype contract
    k_cpu, v_cpu = to_cpu_layout(k_cache, v_cache)
    out = torch.empty(query.shape, dtype=torch.bfloat16)
    op(out, query, key, value, k_cpu, v_cpu, metadata.slot_mapping, metadata.block_tables,
       metadata.query_start_loc, metadata.seq_lens, 0.125)  # fmt: skip

    k_cpu, v_cpu = to_cpu_layout(k_cache, v_cache)  # fresh caches: the op stores again
    out_fp32 = torch.empty(query.shape, dtype=torch.float32)
    op(out_fp32, query.float(), key, value, k_cpu, v_cpu, metadata.slot_mapping,
       metadata.block_tables, metadata.query_start_loc, metadata.seq_lens, 0.125)  # fmt: skip
    torch.testing.assert_close(out, out_fp32.to(torch.bfloat16), atol=0, rtol=0)
    with pytest.raises(RuntimeError, match="share one dtype"):
        op(out_fp32, query, key, value, k_cpu, v_cpu, metadata.slot_mapping,
           metadata.block_tables, metadata.query_start_loc, metadata.seq_lens, 0.125)  # fmt: skip


def test_amx_tiles_are_used_where_the_cpu_has_them():
    """A CPU with AMX-BF16 runs bf16 prefill on tiles: a build that lost the tile path
    (flags, headers) would quietly fall back to the vector one."""
    from llmd.attention.cpu_extension import cpu_flags

    has_tiles = {"amx_bf16", "amx_tile", "avx512_bf16"} <= set(cpu_flags().split())
    assert load_cpu_ops().set_amx_enabled(True) == has_tiles


def test_the_ops_run_on_every_thread_torch_is_given(backend):
    """The extension is built with OpenMP: without it ATen's inline parallel_for runs
    serially, and the attention and layer ops used one core whatever --num-threads said."""
    from llmd.attention.cpu_extension import load_cpu_ops

    num_threads = torch.get_num_threads()
    try:
        for wanted in (1, 2, 3):
            torch.set_num_threads(wanted)
            assert load_cpu_ops().parallel_workers() == wanted
    finally:
        torch.set_num_threads(num_threads)


def test_threads_share_uneven_work(backend):
    """Two threads over long and short sequences give the single-thread result exactly."""
    metadata, query, key, value, k_cache, v_cache = make_case("mixed", 16, 9, 3, 64, torch.float32)
    k_cpu, v_cpu = to_cpu_layout(k_cache, v_cache)
    single = backend.forward(
        AttentionInputs(query, key, value, k_cpu.clone(), v_cpu.clone(), metadata, 0.125)
    )
    num_threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        threaded = backend.forward(
            AttentionInputs(query, key, value, k_cpu, v_cpu, metadata, 0.125)
        )
    finally:
        torch.set_num_threads(num_threads)
    torch.testing.assert_close(threaded, single, atol=0, rtol=0)


def test_views_into_qkv_are_read_in_place_and_other_layouts_are_copied(backend):
    """q/k/v views of the fused projection (strided tokens) and head-scattered copies give
    the contiguous inputs' result exactly; the raw op refuses scattered heads by name."""
    metadata, query, key, value, k_cache, v_cache = make_case("mixed", 16, 9, 3, 64, torch.float32)
    assert query.stride(0) == (9 + 2 * 3) * 64  # make_case's q/k/v are views into qkv
    k_cpu, v_cpu = to_cpu_layout(k_cache, v_cache)
    contiguous = (query.contiguous(), key.contiguous(), value.contiguous())
    want = backend.forward(
        AttentionInputs(*contiguous, k_cpu.clone(), v_cpu.clone(), metadata, 0.125)
    )
    in_place = backend.forward(
        AttentionInputs(query, key, value, k_cpu.clone(), v_cpu.clone(), metadata, 0.125)
    )
    scattered = query.permute(2, 0, 1).contiguous().permute(1, 2, 0)  # head_dim stride != 1
    copied = backend.forward(
        AttentionInputs(scattered, key, value, k_cpu.clone(), v_cpu.clone(), metadata, 0.125)
    )
    torch.testing.assert_close(in_place, want, atol=0, rtol=0)
    torch.testing.assert_close(copied, want, atol=0, rtol=0)
    with pytest.raises(RuntimeError, match="contiguous heads"):
        backend._op(torch.empty(query.shape), scattered, key, value, k_cpu, v_cpu,
                    metadata.slot_mapping, metadata.block_tables, metadata.query_start_loc,
                    metadata.seq_lens, 0.125)  # fmt: skip


def test_slot_outside_cache_is_rejected(backend):
    metadata, query, key, value, k_cache, v_cache = make_case("decodes", 4, 4, 4, 16, torch.float32)
    k_cpu, v_cpu = to_cpu_layout(k_cache, v_cache)
    metadata.slot_mapping[0] = k_cache.shape[0] * 4  # one past the last slot
    with pytest.raises(RuntimeError, match="outside the cache"):
        backend.forward(AttentionInputs(query, key, value, k_cpu, v_cpu, metadata, 0.25))


def test_auto_picks_cpu_backend_on_cpu():
    assert create_attention_backend("auto", torch.device("cpu")).name == "cpu"


def test_build_failure_falls_back_to_torch_with_one_warning(monkeypatch, caplog):
    from llmd.attention import cpu_extension

    monkeypatch.setenv("CXX", "no-such-compiler-llmd")
    monkeypatch.setattr(cpu_extension, "load_cpu_ops", cpu_extension.load_cpu_ops.__wrapped__)
    with caplog.at_level("WARNING"):
        backend = create_attention_backend("cpu", torch.device("cpu"))
    assert backend.name == "torch"
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "no-such-compiler-llmd not found" in warnings[0].getMessage()


def quantized(cache: torch.Tensor, scale: float) -> torch.Tensor:
    """What an fp8 cache holds for `cache`: value / scale, saturated at +-448, nearest even."""
    return (cache.float() / scale).clamp(-448, 448).to(torch.float8_e4m3fn)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("block_size", "num_heads", "num_kv_heads", "head_dim"),
    [(16, 9, 3, 64), (16, 8, 2, 128), (4, 4, 4, 16), (7, 6, 2, 128)],
)
@pytest.mark.parametrize("batch", list(BATCHES))
def test_an_fp8_cache_quantizes_the_store_and_reads_back_scaled(
    backend, batch, block_size, num_heads, num_kv_heads, head_dim, dtype
):
    """kv_cache_dtype=fp8: the op stores key / k_scale and value / v_scale as e4m3 (torch's
    rounding, saturating at 448, bit for bit) and attends over the scaled-back values; NaN
    slots (0x7F) stay unread. Some new values exceed 448 * v_scale, so saturation is hit
    (in values: saturated keys would make the softmax too peaked to compare in fp32)."""
    metadata, query, key, value, k_cache, v_cache = make_case(
        batch, block_size, num_heads, num_kv_heads, head_dim, dtype
    )
    value = value * 1000  # |value / v_scale| reaches past 448 for most draws
    k_scale, v_scale = 0.5, 2.0
    k8, v8 = quantized(k_cache, k_scale), quantized(v_cache, v_scale)
    k_cpu, v_cpu = to_cpu_layout(k8, v8)
    out = backend.forward(
        AttentionInputs(query, key, value, k_cpu, v_cpu, metadata, 0.125, k_scale, v_scale)
    )

    expected_caches = []
    for cache, new, scale in ((k8, key, k_scale), (v8, value, v_scale)):
        raw = cache.view(torch.uint8).clone()  # index_copy_ has no fp8 kernel
        raw.view(-1, num_kv_heads, head_dim).index_copy_(
            0, metadata.slot_mapping, quantized(new, scale).view(torch.uint8)
        )
        expected_caches.append(raw.view(torch.float8_e4m3fn))
    expected_k, expected_v = to_cpu_layout(*expected_caches)
    assert torch.equal(k_cpu.view(torch.uint8), expected_k.view(torch.uint8))
    assert torch.equal(v_cpu.view(torch.uint8), expected_v.view(torch.uint8))
    assert (expected_v.float().abs() == 448).any()  # saturation happened

    assert out.dtype == dtype and not out.isnan().any()
    k_real = expected_caches[0].float() * k_scale
    v_real = expected_caches[1].float() * v_scale
    expected = naive_paged_attention(query.float(), k_real, v_real, metadata, 0.125)
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2  # fp32 math on the fp8 values
    magnitude = expected.abs().max().item()  # values reach ~1000: absolute error scales too
    torch.testing.assert_close(out.float(), expected, atol=tolerance * magnitude, rtol=tolerance)


def test_the_op_refuses_bad_scales_and_mismatched_fp8_inputs(backend):
    metadata, query, key, value, k_cache, v_cache = make_case("mixed", 16, 9, 3, 64, torch.float32)
    k_cpu, v_cpu = to_cpu_layout(quantized(k_cache, 1.0), quantized(v_cache, 1.0))
    args = (metadata.slot_mapping, metadata.block_tables, metadata.query_start_loc,
            metadata.seq_lens, 0.125)  # fmt: skip
    out = torch.empty(query.shape)
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(RuntimeError, match="k_scale and v_scale"):
            backend._op(out, query, key, value, k_cpu, v_cpu, *args, bad, 1.0)
    with pytest.raises(RuntimeError, match="share one dtype"):  # bf16 K/V under fp32 queries
        backend._op(out, query, key.bfloat16(), value.bfloat16(), k_cpu, v_cpu, *args, 1.0, 1.0)
