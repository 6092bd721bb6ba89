"""Checkpoint resolution, sharded loading, architecture dispatch and weight validation.

Every way a model can fail to load must surface as a typed llmd error naming the problem,
and hub resolution must never touch the network when offline.
"""

from __future__ import annotations

import json
import socket

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from llmd.attention.torch_backend import TorchAttentionBackend
from llmd.errors import ModelNotFoundError, UnsupportedModelError
from llmd.models.loader import (
    SAFETENSORS_INDEX,
    load_hf_config,
    load_model,
    model_shape,
    resolve_model_path,
)
from llmd.models.registry import SUPPORTED_ARCHITECTURES, model_class_for
from tests.checkpoints import make_tiny_checkpoint

CPU = torch.device("cpu")


def load(path):
    """Load a checkpoint directory as the runner would, in float32 on the CPU."""
    return load_model(path, load_hf_config(path), TorchAttentionBackend(), torch.float32, CPU)


def rewrite_weights(source, target, edit) -> None:
    """Copy a single-file checkpoint to `target` with its tensor dict changed by `edit`."""
    target.mkdir()
    (target / "config.json").write_text((source / "config.json").read_text())
    tensors = load_file(source / "model.safetensors")
    edit(tensors)
    save_file(tensors, target / "model.safetensors")


def test_sharded_checkpoint_loads_the_same_weights(tmp_path):
    single = make_tiny_checkpoint("qwen2", tmp_path / "single")
    sharded = make_tiny_checkpoint("qwen2", tmp_path / "sharded", max_shard_size="40KB")
    index = json.loads((sharded / SAFETENSORS_INDEX).read_text())
    assert len(set(index["weight_map"].values())) > 1
    assert not (sharded / "model.safetensors").exists()

    expected = load(single).state_dict()
    loaded = load(sharded).state_dict()
    assert loaded.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(loaded[name], tensor, atol=0, rtol=0, msg=name)


def test_loads_in_bfloat16_in_eval_mode(tmp_path):
    path = make_tiny_checkpoint("llama", tmp_path / "llama")
    model = load_model(path, load_hf_config(path), TorchAttentionBackend(), torch.bfloat16, CPU)
    assert not model.training
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in model.parameters())


def test_unsupported_architecture_lists_the_supported_ones(tmp_path):
    config = transformers.GPT2Config(
        n_embd=32, n_layer=1, n_head=2, architectures=["GPT2LMHeadModel"]
    )
    config.save_pretrained(tmp_path)
    hf_config = load_hf_config(tmp_path)
    with pytest.raises(UnsupportedModelError) as error:
        model_class_for(hf_config)
    for architecture in SUPPORTED_ARCHITECTURES:
        assert architecture in str(error.value)
    assert "GPT2LMHeadModel" in str(error.value)
    with pytest.raises(UnsupportedModelError):
        load_model(tmp_path, hf_config, TorchAttentionBackend(), torch.float32, CPU)


@pytest.mark.parametrize(
    "rope_scaling",
    [
        {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 256},
        {"rope_type": "dynamic", "factor": 2.0},
    ],
)
def test_unsupported_rope_scaling_is_refused(rope_scaling):
    config = transformers.LlamaConfig(
        hidden_size=64, num_attention_heads=4, num_hidden_layers=1, rope_scaling=rope_scaling
    )
    with pytest.raises(UnsupportedModelError, match=rope_scaling["rope_type"]):
        model_shape(config)


def test_missing_local_path_raises_model_not_found(tmp_path):
    with pytest.raises(ModelNotFoundError):
        resolve_model_path(str(tmp_path / "no-such-model"))
    with pytest.raises(ModelNotFoundError):
        resolve_model_path("./no-such-model-dir")
    assert resolve_model_path(str(tmp_path)) == tmp_path


def test_unknown_hub_id_offline_raises_without_network(monkeypatch):
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network access attempted")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    with pytest.raises(ModelNotFoundError, match="llmd-tests/no-such-model"):
        resolve_model_path("llmd-tests/no-such-model")
    assert attempts == []


def test_missing_unexpected_and_misshapen_weights_are_named(tmp_path):
    source = make_tiny_checkpoint("llama", tmp_path / "source")
    k_proj = "model.layers.1.self_attn.k_proj.weight"

    rewrite_weights(source, tmp_path / "missing", lambda tensors: tensors.pop(k_proj))
    with pytest.raises(UnsupportedModelError, match=r"missing.*layers\.1\.self_attn\.qkv_proj"):
        load(tmp_path / "missing")

    def add_extra(tensors):
        tensors["model.layers.0.extra.weight"] = torch.zeros(2)

    rewrite_weights(source, tmp_path / "unexpected", add_extra)
    with pytest.raises(UnsupportedModelError, match=r"model\.layers\.0\.extra\.weight"):
        load(tmp_path / "unexpected")

    def shrink(tensors):
        tensors[k_proj] = tensors[k_proj][:-1]

    rewrite_weights(source, tmp_path / "misshapen", shrink)
    with pytest.raises(UnsupportedModelError, match=r"shape \(31, 64\).*\(32, 64\)"):
        load(tmp_path / "misshapen")


def test_rotary_buffers_are_skipped_and_missing_lm_head_ties(tmp_path):
    source = make_tiny_checkpoint("llama", tmp_path / "source")

    def edit(tensors):
        embedding = tensors["model.embed_tokens.weight"]
        tensors["lm_head.weight"] = embedding.clone()
        tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(8)

    rewrite_weights(source, tmp_path / "with_buffers", edit)
    with_lm_head = load(tmp_path / "with_buffers")
    rewrite_weights(source, tmp_path / "no_lm_head", lambda tensors: tensors.pop("lm_head.weight"))
    without_lm_head = load(tmp_path / "no_lm_head")
    assert without_lm_head.lm_head.weight is without_lm_head.model.embed_tokens.weight
    hidden = torch.randn(3, 64)
    torch.testing.assert_close(
        without_lm_head.compute_logits(hidden), with_lm_head.compute_logits(hidden)
    )


@pytest.mark.parametrize("overrides", [{}, {"tie_word_embeddings": True}])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_model_shape_matches_transformers(tmp_path, arch, overrides):
    path = make_tiny_checkpoint(arch, tmp_path / arch, **overrides)
    hf_config = load_hf_config(path)
    shape = model_shape(hf_config)
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(path)
    assert shape.num_params == hf_model.num_parameters()
    assert (shape.num_layers, shape.num_heads, shape.num_kv_heads) == (2, 4, 2)
    assert shape.head_dim == (32 if arch == "qwen3" else 16)
    assert shape.max_model_len == 512 and shape.sliding_window is None
    assert shape.kv_bytes_per_token(4) == 2 * 2 * 2 * shape.head_dim * 4


def test_mistral_sliding_window_caps_max_model_len():
    config = transformers.MistralConfig(
        hidden_size=64,
        num_attention_heads=4,
        num_hidden_layers=1,
        max_position_embeddings=512,
        sliding_window=128,
    )
    shape = model_shape(config)
    assert shape.sliding_window == 128 and shape.max_model_len == 128


def test_fp8_kv_scales_are_read_from_the_checkpoint_and_checked(tmp_path):
    """compressed-tensors' `self_attn.k_scale` / `v_scale` (and llm-compressor's older
    `k_proj.output_scale` names) set each layer's scales; a bad one is named."""
    source = make_tiny_checkpoint("llama", tmp_path / "plain")
    num_layers = json.loads((source / "config.json").read_text())["num_hidden_layers"]

    def add_scales(tensors, old_names=False):
        for layer in range(num_layers):
            prefix = f"model.layers.{layer}.self_attn."
            k_name, v_name = ("k_proj.output_scale", "v_proj.output_scale") if old_names else (
                "k_scale", "v_scale"
            )
            tensors[prefix + k_name] = torch.tensor(0.25 * (layer + 1))
            tensors[prefix + v_name] = torch.tensor([2.0])

    for old_names in (False, True):
        target = tmp_path / f"scaled-{old_names}"
        rewrite_weights(source, target, lambda tensors, old=old_names: add_scales(tensors, old))
        layers = [m for m in load(target).modules() if hasattr(m, "has_kv_scales")]
        assert len(layers) == num_layers
        assert [layer.k_scale for layer in layers] == [0.25 * (i + 1) for i in range(num_layers)]
        assert all(layer.v_scale == 2.0 and layer.has_kv_scales for layer in layers)
    plain = [m for m in load(source).modules() if hasattr(m, "has_kv_scales")]
    assert all(m.k_scale == m.v_scale == 1.0 and not m.has_kv_scales for m in plain)

    def bad_scale(tensors):
        tensors["model.layers.0.self_attn.k_scale"] = torch.tensor(-1.0)

    rewrite_weights(source, tmp_path / "bad", bad_scale)
    with pytest.raises(UnsupportedModelError, match=r"self_attn\.k_scale"):
        load(tmp_path / "bad")
