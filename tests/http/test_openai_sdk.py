"""The official openai package against a real daemon: completions, chat, usage, errors.

Counts are checked against independent sources: token-id prompts of known length, the
tokenizer loaded in the test, logprob entries (one per generated token), max_tokens.
"""

from __future__ import annotations

import openai
import pytest

from llmd.engine.tokenizer import load_tokenizer

GREEDY = {"temperature": 0.0}
NO_EOS = {"extra_body": {"ignore_eos": True}}


@pytest.fixture(scope="module")
def sdk(served_http):
    """An OpenAI client pointed at the daemon (no retries, so errors surface at once)."""
    with openai.OpenAI(base_url=served_http.v1, api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def model_id(sdk):
    """The id /v1/models lists."""
    (model,) = sdk.models.list().data
    return model.id


def test_models_lists_the_served_model(sdk, model_id, served_http):
    assert model_id == str(served_http.model_dir)
    assert sdk.models.retrieve(model_id).id == model_id


def test_completion_usage_matches_token_counts(sdk, model_id, served_http):
    prompt = "The quick brown fox"
    num_prompt_tokens = len(load_tokenizer(str(served_http.model_dir)).encode(prompt))
    result = sdk.completions.create(model=model_id, prompt=prompt, max_tokens=9, **NO_EOS)
    assert result.object == "text_completion" and len(result.choices) == 1
    assert result.choices[0].finish_reason == "length"
    assert result.usage.prompt_tokens == num_prompt_tokens
    assert result.usage.completion_tokens == 9
    assert result.usage.total_tokens == num_prompt_tokens + 9


def test_token_id_prompts_and_batches(sdk, model_id):
    ids = [5, 17, 42, 99, 120, 7]
    single = sdk.completions.create(model=model_id, prompt=ids, max_tokens=3, **GREEDY, **NO_EOS)
    assert single.usage.prompt_tokens == 6
    batch = sdk.completions.create(
        model=model_id, prompt=[ids, ids[:2], ids[:4]], max_tokens=3, **GREEDY, **NO_EOS
    )
    assert [c.index for c in batch.choices] == [0, 1, 2]
    assert batch.usage.prompt_tokens == 6 + 2 + 4
    assert batch.usage.completion_tokens == 9
    assert batch.choices[0].text == single.choices[0].text  # greedy: same prompt, same text
    texts = sdk.completions.create(model=model_id, prompt=["a b", "c d"], max_tokens=2, **NO_EOS)
    assert len(texts.choices) == 2


def test_streamed_completion_equals_the_blocking_one(sdk, model_id):
    kwargs = dict(model=model_id, prompt="Once upon", max_tokens=12, **GREEDY, **NO_EOS)
    whole = sdk.completions.create(**kwargs)
    chunks = list(
        sdk.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert reasons[-1] == "length" and set(reasons[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12


def test_stream_logprobs_count_one_per_generated_token(sdk, model_id):
    stream = sdk.completions.create(
        model=model_id, prompt="Count", max_tokens=7, logprobs=2, stream=True,
        stream_options={"include_usage": True}, **NO_EOS,
    )  # fmt: skip
    num_entries, usage = 0, None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].logprobs is not None:
            logprobs = chunk.choices[0].logprobs
            num_entries += len(logprobs.tokens)
            assert all(len(top) <= 2 for top in logprobs.top_logprobs)
            assert all(lp <= 0 for lp in logprobs.token_logprobs)
        if chunk.usage is not None:
            usage = chunk.usage
    assert num_entries == 7 == usage.completion_tokens


def test_stop_string_ends_the_text_before_it(sdk, model_id):
    kwargs = dict(model=model_id, prompt="Tell me", max_tokens=40, **GREEDY, **NO_EOS)
    text = sdk.completions.create(**kwargs).choices[0].text
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    assert stop.strip(), f"no usable stop string in {text!r}"
    stopped = sdk.completions.create(**kwargs, stop=[stop, "never-generated-zzz"])
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].text == text[: text.index(stop)]
    streamed = sdk.completions.create(**kwargs, stop=stop, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == text[: text.index(stop)]


def test_seeded_sampling_repeats(sdk, model_id):
    kwargs = dict(model=model_id, prompt="Random", max_tokens=16, temperature=1.0, **NO_EOS)
    first = sdk.completions.create(**kwargs, seed=1234).choices[0].text
    again = sdk.completions.create(**kwargs, seed=1234).choices[0].text
    other = sdk.completions.create(**kwargs, seed=4321).choices[0].text
    assert first == again
    assert first != other


def test_n_choices_are_seeded_apart_and_choice_j_equals_seed_plus_j(sdk, model_id):
    ids = [5, 17, 42, 99]
    kwargs = dict(model=model_id, max_tokens=6, temperature=1.0, seed=70, **NO_EOS)
    fanned = sdk.completions.create(**kwargs, prompt=[ids, ids[:2]], n=3)
    assert [c.index for c in fanned.choices] == [0, 1, 2, 3, 4, 5]
    singles = [
        sdk.completions.create(**{**kwargs, "seed": 70 + j}, prompt=prompt).choices[0].text
        for prompt in (ids, ids[:2])
        for j in range(3)
    ]
    assert [c.text for c in fanned.choices] == singles
    assert len(set(singles[:3])) > 1  # the seeds really differ
    assert fanned.usage.prompt_tokens == 4 + 2  # each prompt billed once, as OpenAI does
    assert fanned.usage.completion_tokens == 6 * 6
    streamed = sdk.completions.create(**kwargs, prompt=[ids, ids[:2]], n=3, stream=True,
                                      stream_options={"include_usage": True})  # fmt: skip
    texts = [""] * 6
    for chunk in streamed:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
        last = chunk
    assert texts == singles
    assert last.usage.prompt_tokens == 6 and last.usage.completion_tokens == 36


def test_chat_n_choices_blocking_and_streamed(sdk, model_id):
    messages = [{"role": "user", "content": "Hello there"}]
    kwargs = dict(model=model_id, messages=messages, max_tokens=5, temperature=1.0, seed=3,
                  n=4, **NO_EOS)  # fmt: skip
    reply = sdk.chat.completions.create(**kwargs)
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    one = sdk.chat.completions.create(**{**kwargs, "n": 1, "seed": 5})
    assert reply.choices[2].message.content == one.choices[0].message.content
    assert reply.usage.prompt_tokens == one.usage.prompt_tokens
    assert reply.usage.completion_tokens == 4 * 5
    texts: dict[int, str] = {}
    roles: dict[int, str] = {}
    for chunk in sdk.chat.completions.create(**kwargs, stream=True):
        for choice in chunk.choices:
            if choice.delta.role:
                roles[choice.index] = choice.delta.role
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
    assert roles == {i: "assistant" for i in range(4)}
    assert [texts[i] for i in range(4)] == [c.message.content for c in reply.choices]


def test_chat_blocking_and_streaming(sdk, model_id):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello there"},
    ]
    kwargs = dict(model=model_id, messages=messages, max_completion_tokens=10, **GREEDY, **NO_EOS)
    reply = sdk.chat.completions.create(**kwargs)
    assert reply.object == "chat.completion"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 10
    chunks = list(
        sdk.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reply.choices[0].message.content
    assert chunks[-1].usage.prompt_tokens == reply.usage.prompt_tokens


def test_chat_logprobs(sdk, model_id):
    reply = sdk.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": "hi"}], max_tokens=5,
        logprobs=True, top_logprobs=3, **NO_EOS,
    )  # fmt: skip
    content = reply.choices[0].logprobs.content
    assert len(content) == 5
    assert all(len(entry.top_logprobs) == 3 for entry in content)
    assert all(bytes(entry.bytes).decode() == entry.token for entry in content)


def test_errors_are_the_sdks_typed_exceptions(sdk, model_id):
    for n in (0, 129):
        with pytest.raises(openai.BadRequestError) as error:
            sdk.completions.create(model=model_id, prompt="x", n=n)
        assert error.value.status_code == 400 and error.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError) as error:
        sdk.completions.create(model=model_id, prompt="x", temperature=-0.5)
    assert error.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as error:
        sdk.completions.create(model=model_id, prompt="x", max_tokens=0)  # 0 needs echo
    assert error.value.body["param"] == "max_tokens"
    with pytest.raises(openai.NotFoundError) as error:
        sdk.completions.create(model="no-such-model", prompt="x")
    assert error.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as error:
        sdk.chat.completions.create(
            model=model_id, messages=[{"role": "user", "content": "hi"}], max_completion_tokens=0
        )
    assert error.value.body["param"] == "max_completion_tokens"


def test_too_long_prompt_is_a_400_with_the_numbers(sdk, model_id, served_http):
    from tests.http.http_harness import MAX_MODEL_LEN

    prompt = [7] * (MAX_MODEL_LEN + 10)
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as error:
            sdk.completions.create(model=model_id, prompt=prompt, stream=stream)
        assert error.value.body["code"] == "context_length_exceeded"
        assert f"{MAX_MODEL_LEN + 10} tokens" in error.value.message
        assert f"max_model_len is {MAX_MODEL_LEN}" in error.value.message
