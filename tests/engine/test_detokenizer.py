"""Incremental detokenizer: streamed text equals a full decode, UTF-8 safety, stop strings."""

from __future__ import annotations

import random

import pytest

from llmd.engine import detokenizer as detokenizer_module
from llmd.engine.detokenizer import IncrementalDetokenizer
from llmd.engine.tokenizer import load_tokenizer
from tests.tokenizers_factory import EOS_TOKEN, make_tiny_metaspace_tokenizer, make_tiny_tokenizer

REPLACEMENT = "\ufffd"
ALPHABET = list("abcdefgh ,.!?\n") + list("éöçΩ日本語中文✓🙂👍")


@pytest.fixture(scope="module")
def byte_level(tmp_path_factory):
    return load_tokenizer(str(make_tiny_tokenizer(tmp_path_factory.mktemp("bl") / "tok")))


@pytest.fixture(scope="module")
def metaspace(tmp_path_factory):
    path = make_tiny_metaspace_tokenizer(tmp_path_factory.mktemp("ms") / "tok")
    return load_tokenizer(str(path))


def _stream(detok: IncrementalDetokenizer, token_ids: list[int], rng: random.Random | None):
    """Feed token_ids one at a time (or in random chunks); return the deltas' texts."""
    deltas, start = [], 0
    while start < len(token_ids):
        size = rng.randint(1, 5) if rng else 1
        deltas.append(detok.update(token_ids[start : start + size]).text)
        start += size
    return deltas


def _output_ids(tokenizer, prompt: str, completion: str) -> list[int]:
    """Token ids of `completion` as generated after `prompt` (no BOS)."""
    prompt_ids = tokenizer.encode(prompt)
    full_ids = tokenizer.encode(prompt + completion)
    if full_ids[: len(prompt_ids)] == prompt_ids:
        return full_ids[len(prompt_ids) :]
    return tokenizer.hf_tokenizer.encode(completion, add_special_tokens=False)


def _random_text(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 40)))


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_random_token_ids_stream_to_the_full_decode(byte_level, skip_special_tokens):
    rng = random.Random(0)
    prompt_ids = byte_level.encode("The capital of France is")
    for trial in range(150):
        output_ids = [rng.randrange(byte_level.vocab_size) for _ in range(rng.randint(1, 60))]
        detok = IncrementalDetokenizer(byte_level, prompt_ids, skip_special_tokens)
        deltas = _stream(detok, output_ids, rng if trial % 2 else None)
        text = "".join(deltas) + detok.flush()
        assert text == byte_level.decode(output_ids, skip_special_tokens=skip_special_tokens)
        assert detok.output_text == text


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_random_metaspace_token_ids_stream_to_the_full_decode(metaspace, skip_special_tokens):
    # Byte tokens are left out: a byte-fallback decoder turns a whole run of byte tokens into
    # U+FFFDs when any of them is invalid, which no incremental decoder can anticipate.
    byte_token_ids = set(range(metaspace.hf_tokenizer.convert_tokens_to_ids("<0x00>"), 400))
    candidates = [i for i in range(metaspace.vocab_size) if i not in byte_token_ids]
    rng = random.Random(2)
    prompt_ids = metaspace.encode("The capital of France is")
    prompt_text = metaspace.decode(prompt_ids, skip_special_tokens)
    for trial in range(100):
        output_ids = [rng.choice(candidates) for _ in range(rng.randint(1, 60))]
        detok = IncrementalDetokenizer(metaspace, prompt_ids, skip_special_tokens)
        text = "".join(_stream(detok, output_ids, rng if trial % 2 else None)) + detok.flush()
        full = metaspace.decode(prompt_ids + output_ids, skip_special_tokens)
        assert text == full[len(prompt_text) :]


@pytest.mark.parametrize("tokenizer_name", ["byte_level", "metaspace"])
def test_valid_text_streams_exactly_without_replacement_chars(request, tokenizer_name):
    tokenizer = request.getfixturevalue(tokenizer_name)
    rng = random.Random(1)
    for trial in range(100):
        prompt, completion = _random_text(rng), _random_text(rng)
        prompt_ids = tokenizer.encode(prompt)
        output_ids = _output_ids(tokenizer, prompt, completion)
        detok = IncrementalDetokenizer(tokenizer, prompt_ids)
        deltas = _stream(detok, output_ids, rng if trial % 2 else None)
        assert all(REPLACEMENT not in delta for delta in deltas)
        full = tokenizer.decode(prompt_ids + output_ids)
        expected = full[len(tokenizer.decode(prompt_ids)) :]
        assert "".join(deltas) + detok.flush() == expected


def test_multi_byte_characters_are_split_across_tokens(byte_level, metaspace):
    # The test tokenizers must really split characters, or the tests above prove little.
    assert len(byte_level.encode("日")) > 2  # BOS + several byte tokens
    assert len(metaspace.encode("🙂")) > 2


def test_metaspace_keeps_the_completion_leading_space(metaspace):
    prompt = "The capital of France is"
    output_ids = _output_ids(metaspace, prompt, " Paris")
    detok = IncrementalDetokenizer(metaspace, metaspace.encode(prompt))
    assert "".join(_stream(detok, output_ids, None)) + detok.flush() == " Paris"
    # Decoded alone, the tokenizer strips that space; the prompt context keeps it.
    assert metaspace.decode(output_ids) == "Paris"


def test_byte_level_spaces_are_preserved(byte_level):
    output_ids = byte_level.encode("  two  spaces \n\n end ")[1:]
    detok = IncrementalDetokenizer(byte_level, [])
    assert "".join(_stream(detok, output_ids, None)) + detok.flush() == "  two  spaces \n\n end "


def test_decoding_window_stays_bounded(byte_level, monkeypatch):
    lengths: list[int] = []
    decode = byte_level.decode

    def recording_decode(token_ids, skip_special_tokens=True):
        lengths.append(len(token_ids))
        return decode(token_ids, skip_special_tokens)

    monkeypatch.setattr(byte_level, "decode", recording_decode)
    output_ids = byte_level.encode("the quick brown fox jumps over the lazy dog. " * 20)[1:]
    detok = IncrementalDetokenizer(byte_level, [1, 2, 3, 4, 5, 6, 7, 8])
    text = "".join(_stream(detok, output_ids, None))
    assert text == "the quick brown fox jumps over the lazy dog. " * 20
    assert max(lengths) <= detokenizer_module.MAX_WINDOW_TOKENS
    assert len(lengths) < 2 * len(output_ids)


def _run_with_stops(tokenizer, text: str, stop: tuple[str, ...]):
    output_ids = _output_ids(tokenizer, "", text)
    detok = IncrementalDetokenizer(tokenizer, tokenizer.encode(""), stop=stop)
    deltas = [detok.update([token_id]) for token_id in output_ids]
    return detok, deltas, output_ids


def test_stop_string_spanning_tokens_and_updates(byte_level):
    text = "Hello world. The end"
    detok, deltas, output_ids = _run_with_stops(byte_level, text, ("lo wor",))
    stop_index = next(i for i, d in enumerate(deltas) if d.stop_string is not None)
    # The stop string needs several tokens: it is only seen once its last piece arrives.
    covered = byte_level.decode(output_ids[: stop_index + 1])
    assert "lo wor" in covered and "lo wor" not in byte_level.decode(output_ids[:stop_index])
    assert deltas[stop_index].stop_string == "lo wor"
    assert "".join(d.text for d in deltas) == "Hel"
    assert all(d.text == "" and d.stop_string is None for d in deltas[stop_index + 1 :])
    assert detok.output_text == "Hel" and detok.is_stopped
    assert detok.flush() == "" and detok.output_text == "Hel"


def test_stop_string_at_the_very_start(byte_level):
    detok, deltas, _ = _run_with_stops(byte_level, "Hello world", ("Hello",))
    assert "".join(d.text for d in deltas) == ""
    assert [d.stop_string for d in deltas].count("Hello") == 1
    assert detok.output_text == ""


def test_the_stop_string_completed_first_wins(byte_level):
    detok, deltas, _ = _run_with_stops(
        byte_level, "the quick brown fox jumps", ("fox", "quick", "jumps")
    )
    assert detok.stop_string == "quick"
    assert "".join(d.text for d in deltas) == detok.output_text == "the "
    # Within one update too, whatever order they are listed in.
    detok = IncrementalDetokenizer(byte_level, [], stop=("fox", "brown"))
    delta = detok.update(_output_ids(byte_level, "", "the quick brown fox"))
    assert (delta.text, delta.stop_string) == ("the quick ", "brown")
    # "ick" completes before "quick brown" (which starts earlier), as it would streamed.
    for stop in [("quick brown", "ick"), ("ick", "quick brown")]:
        detok = IncrementalDetokenizer(byte_level, [], stop=stop)
        delta = detok.update(_output_ids(byte_level, "", "the quick brown fox"))
        assert (delta.text, delta.stop_string) == ("the qu", "ick")
    # Same end: the longer stop string (earlier start) wins.
    detok = IncrementalDetokenizer(byte_level, [], stop=("own", "brown"))
    delta = detok.update(_output_ids(byte_level, "", "the quick brown fox"))
    assert (delta.text, delta.stop_string) == ("the quick ", "brown")


def test_text_that_may_begin_a_stop_string_is_held_until_flush(byte_level):
    detok, deltas, _ = _run_with_stops(byte_level, "Hello wor", ("world!",))
    assert "".join(d.text for d in deltas) == "Hello "
    assert detok.flush() == "wor"
    assert detok.output_text == "Hello wor" and detok.stop_string is None


def test_held_text_is_released_once_it_cannot_begin_a_stop(byte_level):
    detok, deltas, _ = _run_with_stops(byte_level, "Hello wonderful", ("world",))
    assert "".join(d.text for d in deltas) == "Hello wonderful"
    assert detok.flush() == ""


def test_stop_string_over_multi_byte_characters(byte_level):
    detok, deltas, _ = _run_with_stops(byte_level, "héllo 日本語 🙂 done", ("本語 🙂",))
    assert detok.output_text == "héllo 日"
    assert all(REPLACEMENT not in d.text for d in deltas)


def test_skip_special_tokens(byte_level):
    eos_id = byte_level.eos_token_ids[0]
    output_ids = [*_output_ids(byte_level, "", "Hi"), eos_id, *_output_ids(byte_level, "", " x")]
    skipped = IncrementalDetokenizer(byte_level, [], skip_special_tokens=True)
    kept = IncrementalDetokenizer(byte_level, [], skip_special_tokens=False)
    assert "".join(_stream(skipped, output_ids, None)) + skipped.flush() == "Hi x"
    assert "".join(_stream(kept, output_ids, None)) + kept.flush() == f"Hi{EOS_TOKEN} x"


def test_update_with_no_tokens_emits_nothing(byte_level):
    detok = IncrementalDetokenizer(byte_level, byte_level.encode("x"))
    assert detok.update([]).text == ""
    assert detok.flush() == ""


def test_prompt_ending_mid_character_emits_the_completed_character(byte_level):
    ids = byte_level.hf_tokenizer.encode("ab日", add_special_tokens=False)
    assert len(ids) > 3  # "日" spans several byte tokens
    detok = IncrementalDetokenizer(byte_level, ids[:-1])
    assert detok.update(ids[-1:]).text == "日"


def test_the_stop_token_that_ended_the_request_is_not_decoded(byte_level):
    eos_id = byte_level.eos_token_ids[0]
    output_ids = _output_ids(byte_level, "", "Hi there")
    detok = IncrementalDetokenizer(byte_level, [], skip_special_tokens=False)
    text = detok.update(output_ids[:-1]).text
    text += detok.update([output_ids[-1], eos_id], exclude_last=True).text + detok.flush()
    assert text == detok.output_text == "Hi there"


@pytest.mark.parametrize("tokenizer_name", ["byte_level", "metaspace"])
def test_random_stop_strings_cut_at_the_first_match(request, tokenizer_name):
    tokenizer = request.getfixturevalue(tokenizer_name)
    rng = random.Random(3)
    for trial in range(150):
        text = _random_text(rng) + _random_text(rng)
        output_ids = _output_ids(tokenizer, "", text)
        full = tokenizer.decode(tokenizer.encode("") + output_ids)
        stops = []
        for _ in range(rng.randint(1, 3)):
            start = rng.randrange(len(full))
            stops.append(full[start : start + rng.randint(1, 4)] if rng.random() < 0.7 else "zz")
        # A character-by-character stream stops at the match that ends first.
        matches = [(full.find(s) + len(s), full.find(s)) for s in stops if s in full]
        expected = full[: min(matches)[1]] if matches else full
        detok = IncrementalDetokenizer(tokenizer, tokenizer.encode(""), stop=tuple(stops))
        deltas = [d.text for d in _deltas(detok, output_ids, rng if trial % 2 else None)]
        assert detok.is_stopped == bool(matches)
        assert "".join(deltas) + detok.flush() == detok.output_text == expected


def _deltas(detok: IncrementalDetokenizer, token_ids: list[int], rng: random.Random | None):
    deltas, start = [], 0
    while start < len(token_ids):
        size = rng.randint(1, 5) if rng else 1
        deltas.append(detok.update(token_ids[start : start + size]))
        start += size
    return deltas
