"""counting_triton_compiles: installs a chained post-compile hook and always restores it."""

from __future__ import annotations

import pytest

from llmd.bench import triton_compiles
from llmd.bench.triton_compiles import counting_triton_compiles


class FakeRuntime:
    """Triton's runtime knobs, reduced to the hook slot."""

    jit_post_compile_hook = None


def test_compiles_inside_the_block_are_counted_and_the_old_hook_chained(monkeypatch):
    runtime = FakeRuntime()
    seen_by_previous = []
    runtime.jit_post_compile_hook = lambda **kwargs: seen_by_previous.append(kwargs["repr"])
    previous = runtime.jit_post_compile_hook
    monkeypatch.setattr(triton_compiles, "_runtime_knobs", lambda: runtime)
    with counting_triton_compiles() as compiled:
        hook = runtime.jit_post_compile_hook
        assert hook is not previous
        hook(key=1, repr="_decode_attention_kernel[num_warps=4](seq_lens_ptr: *i32)")
        hook(key=2, repr="_kv_store_kernel[num_warps=2]()")
    assert compiled == ["_decode_attention_kernel", "_kv_store_kernel"]
    assert len(seen_by_previous) == 2
    assert runtime.jit_post_compile_hook is previous


def test_the_hook_is_restored_when_the_run_fails(monkeypatch):
    runtime = FakeRuntime()
    monkeypatch.setattr(triton_compiles, "_runtime_knobs", lambda: runtime)
    with pytest.raises(RuntimeError), counting_triton_compiles():
        raise RuntimeError("the engine failed")
    assert runtime.jit_post_compile_hook is None


def test_without_triton_hooks_nothing_is_counted_or_installed(monkeypatch):
    monkeypatch.setattr(triton_compiles, "_runtime_knobs", lambda: None)
    with counting_triton_compiles() as compiled:
        assert compiled is None


def test_the_installed_triton_has_the_hook_slot():
    triton = pytest.importorskip("triton")
    runtime = triton_compiles._runtime_knobs()
    if not hasattr(getattr(triton, "knobs", None), "runtime"):
        pytest.skip("this Triton has no runtime knobs")
    assert runtime is not None and hasattr(runtime, "jit_post_compile_hook")
