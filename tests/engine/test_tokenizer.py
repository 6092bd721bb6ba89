"""Tokenizer wrapper: encode/decode, chat templates with typed errors, merged EOS ids."""

from __future__ import annotations

import json
import shutil

import pytest

from llmd.engine.tokenizer import load_tokenizer
from llmd.errors import InvalidParameterError, ModelNotFoundError
from tests.tokenizers_factory import BOS_TOKEN, EOS_TOKEN, make_tiny_tokenizer

TEXT = "Hello world, héllo wörld 日本語 🙂"


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return make_tiny_tokenizer(tmp_path_factory.mktemp("tok") / "tiny")


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir):
    return load_tokenizer(str(tokenizer_dir))


def test_encode_adds_bos_and_decode_round_trips(tokenizer):
    bos_id = tokenizer.bos_token_id
    ids = tokenizer.encode(TEXT)
    assert ids[0] == bos_id and bos_id not in ids[1:]
    assert tokenizer.decode(ids) == TEXT
    assert tokenizer.decode(ids, skip_special_tokens=False) == BOS_TOKEN + TEXT
    assert tokenizer.vocab_size == 400
    assert tokenizer.name.endswith("tiny")


def test_encode_without_bos_when_config_says_so(tmp_path):
    tokenizer = load_tokenizer(str(make_tiny_tokenizer(tmp_path / "nobos", add_bos=False)))
    ids = tokenizer.encode(TEXT)
    assert tokenizer.bos_token_id not in ids
    assert tokenizer.decode(ids) == TEXT


def test_encode_rejects_non_strings(tokenizer):
    with pytest.raises(InvalidParameterError) as error:
        tokenizer.encode([1, 2])
    assert error.value.parameter == "prompt"


def test_chat_template_renders_once_with_a_single_bos(tokenizer):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "héllo"},
        {"role": "assistant", "content": "Hi"},
        {"role": "user", "content": "The capital?"},
    ]
    ids = tokenizer.apply_chat_template(messages)
    expected = (
        f"{BOS_TOKEN}system: Be brief.\nuser: héllo\nassistant: Hi{EOS_TOKEN}\n"
        "user: The capital?\nassistant:"
    )
    assert tokenizer.decode(ids, skip_special_tokens=False) == expected
    assert ids.count(tokenizer.bos_token_id) == 1
    without_prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=False)
    assert tokenizer.decode(without_prompt, skip_special_tokens=False) == expected.removesuffix(
        "assistant:"
    )


@pytest.mark.parametrize(
    "messages",
    [
        [],
        "hello",
        [{"role": "user"}],
        [{"content": "hi"}],
        [{"role": "", "content": "hi"}],
        [{"role": "user", "content": 3}],
        ["user: hi"],
    ],
)
def test_malformed_messages_raise_typed_errors(tokenizer, messages):
    with pytest.raises(InvalidParameterError) as error:
        tokenizer.apply_chat_template(messages)
    assert error.value.parameter == "messages"


def test_missing_chat_template_raises_typed_error(tokenizer_dir, tmp_path):
    plain_dir = tmp_path / "plain"
    shutil.copytree(tokenizer_dir, plain_dir)
    config_path = plain_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    del config["chat_template"]
    config_path.write_text(json.dumps(config))
    tokenizer = load_tokenizer(str(plain_dir))
    assert not tokenizer.has_chat_template
    with pytest.raises(InvalidParameterError) as error:
        tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    assert error.value.parameter == "messages"
    assert "chat template" in str(error.value)


def test_template_errors_become_typed_errors(tokenizer_dir, tmp_path):
    strict_dir = tmp_path / "strict"
    shutil.copytree(tokenizer_dir, strict_dir)
    config_path = strict_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = (
        "{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('system messages are not supported') }}{% endif %}"
        "{{ m['content'] }}{% endfor %}"
    )
    config_path.write_text(json.dumps(config))
    tokenizer = load_tokenizer(str(strict_dir))
    with pytest.raises(InvalidParameterError, match="system messages") as error:
        tokenizer.apply_chat_template([{"role": "system", "content": "x"}])
    assert error.value.parameter == "messages"


@pytest.mark.parametrize(
    ("generation_eos", "expected_extra"), [(5, (5,)), ([1, 7, 9], (7, 9)), (None, ())]
)
def test_eos_ids_merge_generation_config(tokenizer_dir, tmp_path, generation_eos, expected_extra):
    model_dir = tmp_path / "model"
    shutil.copytree(tokenizer_dir, model_dir)
    (model_dir / "generation_config.json").write_text(json.dumps({"eos_token_id": generation_eos}))
    tokenizer = load_tokenizer(str(model_dir))
    eos_id = tokenizer.hf_tokenizer.eos_token_id
    assert tokenizer.eos_token_ids == (eos_id, *expected_extra)


def test_generation_config_read_from_separate_model_dir(tokenizer_dir, tmp_path):
    model_dir = tmp_path / "weights"
    model_dir.mkdir()
    (model_dir / "generation_config.json").write_text(json.dumps({"eos_token_id": [42]}))
    tokenizer = load_tokenizer(str(tokenizer_dir), model_path=str(model_dir))
    assert tokenizer.eos_token_ids == (tokenizer.hf_tokenizer.eos_token_id, 42)


def test_missing_directory_raises_model_not_found(tmp_path):
    with pytest.raises(ModelNotFoundError) as error:
        load_tokenizer(str(tmp_path / "absent"))
    assert error.value.parameter == "tokenizer"
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    with pytest.raises(ModelNotFoundError):
        load_tokenizer(str(empty_dir))
