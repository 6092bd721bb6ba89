"""Completions' echo (with max_tokens 0 and logprobs), vLLM's prompt_logprobs, and the
/tokenize and /detokenize routes, against a real daemon on the tiny model.

The prompt logprobs over HTTP are checked against the offline engine's on the same model,
whose own values tests/integration/test_prompt_logprobs.py checks against HF.
"""

from __future__ import annotations

import json
import math

import httpx
import pytest

PROMPT = "The quick brown fox jumps over the lazy dog"
TOLERANCE = 1e-3
"""Same engine, same dtype: only the threads' summation order may differ."""


def _post(served_http, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{served_http.url}{path}", json=body, timeout=60)


@pytest.fixture(scope="module")
def prompt_ids(served_http) -> list[int]:
    response = _post(served_http, "/tokenize", {"prompt": PROMPT})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["count"] == len(body["tokens"]) > 3
    assert body["max_model_len"] == 512
    return body["tokens"]


@pytest.fixture(scope="module")
def offline_entries(served_http, prompt_ids):
    """The offline engine's prompt logprobs of the same ids on the same model (top 2), in
    the daemon's dtype (auto: bfloat16 where the CPU has native bf16 math)."""
    from llmd import LLM, SamplingParams

    llm = LLM(str(served_http.model_dir), device="cpu", block_size=16)
    params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=2)
    return llm.generate([prompt_ids], params)[0].prompt_logprobs


def test_tokenize_detokenize_round_trip(served_http, prompt_ids):
    response = _post(served_http, "/detokenize", {"tokens": prompt_ids})
    assert response.status_code == 200, response.text
    assert response.json()["prompt"].endswith(PROMPT)  # after any BOS the tokenizer adds
    plain = _post(served_http, "/tokenize", {"prompt": PROMPT, "add_special_tokens": False})
    assert plain.json()["tokens"] == prompt_ids[len(prompt_ids) - plain.json()["count"] :]
    without = plain.json()["tokens"]
    text = _post(served_http, "/detokenize", {"tokens": without}).json()["prompt"]
    assert text == PROMPT


def test_tokenize_refusals_name_the_field(served_http):
    both = _post(served_http, "/tokenize", {"prompt": "a", "messages": [{"role": "user"}]})
    assert both.status_code == 400 and both.json()["error"]["param"] == "prompt"
    negative = _post(served_http, "/detokenize", {"tokens": [1, -2]})
    assert negative.status_code == 400 and negative.json()["error"]["param"] == "tokens"
    missing = _post(served_http, "/detokenize", {})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "tokens"


def test_echo_max_tokens_zero_gives_the_prompt_and_its_logprobs(
    served_http, prompt_ids, offline_entries
):
    body = {"prompt": prompt_ids, "echo": True, "logprobs": 2, "max_tokens": 0}
    response = _post(served_http, "/v1/completions", body)
    assert response.status_code == 200, response.text
    answer = response.json()
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["text"].endswith(PROMPT)
    assert answer["usage"]["completion_tokens"] == 0
    logprobs = choice["logprobs"]
    assert len(logprobs["tokens"]) == len(prompt_ids)
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    assert "".join(logprobs["tokens"]) == choice["text"]
    assert logprobs["text_offset"][0] == 0
    for position in range(1, len(prompt_ids)):
        expected = offline_entries[position]
        assert math.isclose(
            logprobs["token_logprobs"][position], expected.logprob, abs_tol=TOLERANCE
        )
        top = logprobs["top_logprobs"][position]
        # Keyed by text, as OpenAI's are: tokens of equal text (byte tokens) share a key,
        # which keeps the likelier one; the actual token is always there.
        assert math.isclose(max(top.values()), expected.top_logprobs[0], abs_tol=TOLERANCE)
        assert top[logprobs["tokens"][position]] >= logprobs["token_logprobs"][position] - 1e-6


def test_echo_with_one_token_puts_the_prompt_first(served_http, prompt_ids, offline_entries):
    """lm-eval's multiple-choice request: echo, logprobs 1, max_tokens 1, greedy."""
    body = {"prompt": PROMPT, "echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0}
    choice = _post(served_http, "/v1/completions", body).json()["choices"][0]
    logprobs = choice["logprobs"]
    assert len(logprobs["token_logprobs"]) == len(prompt_ids) + 1  # the prompt, then one
    assert logprobs["token_logprobs"][0] is None
    assert math.isclose(
        logprobs["token_logprobs"][1], offline_entries[1].logprob, abs_tol=TOLERANCE
    )
    generated = logprobs["tokens"][-1]
    assert choice["text"] == PROMPT + generated
    assert logprobs["text_offset"][-1] == len(PROMPT)


def test_echo_without_logprobs_and_streamed(served_http):
    body = {"prompt": PROMPT, "echo": True, "max_tokens": 3, "ignore_eos": True, "temperature": 0}
    whole = _post(served_http, "/v1/completions", body).json()["choices"][0]
    assert whole["text"].startswith(PROMPT) and len(whole["text"]) > len(PROMPT)
    assert whole["logprobs"] is None
    texts = []
    stream_body = {**body, "stream": True}
    with httpx.stream(
        "POST", f"{served_http.v1}/completions", json=stream_body, timeout=60
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                texts.append(json.loads(line.removeprefix("data: "))["choices"][0]["text"])
    assert texts[0].startswith(PROMPT)  # the first chunk echoes the prompt
    assert "".join(texts) == whole["text"]


def test_vllm_prompt_logprobs_field(served_http, prompt_ids, offline_entries):
    body = {"prompt": prompt_ids, "prompt_logprobs": 2, "max_tokens": 1}
    choice = _post(served_http, "/v1/completions", body).json()["choices"][0]
    entries = choice["prompt_logprobs"]
    assert len(entries) == len(prompt_ids) and entries[0] is None
    for position in range(1, len(prompt_ids)):
        actual = entries[position][str(prompt_ids[position])]
        expected = offline_entries[position]
        assert math.isclose(actual["logprob"], expected.logprob, abs_tol=TOLERANCE)
        assert actual["rank"] == expected.rank
        top_ids = [
            int(token_id) for token_id, item in entries[position].items() if item["rank"] <= 2
        ]
        assert set(expected.top_token_ids) <= set(top_ids)
    assert (
        "prompt_logprobs"
        not in _post(served_http, "/v1/completions", {"prompt": "x", "max_tokens": 1}).json()[
            "choices"
        ][0]
    )


def test_echo_refusals(served_http):
    streamed = {"prompt": "x", "echo": True, "max_tokens": 0, "stream": True}
    response = _post(served_http, "/v1/completions", streamed)
    assert response.status_code == 400 and response.json()["error"]["param"] == "max_tokens"
    bad = _post(served_http, "/v1/completions", {"prompt": "x", "prompt_logprobs": 21})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "prompt_logprobs"
    chat = {"messages": [{"role": "user", "content": "hi"}], "prompt_logprobs": 1}
    refused = _post(served_http, "/v1/chat/completions", chat)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "prompt_logprobs"
    without = _post(served_http, "/v1/completions", {"prompt": "x", "max_tokens": 0})
    assert without.status_code == 400 and without.json()["error"]["param"] == "max_tokens"


def test_streamed_echo_carries_the_prompt_logprobs_in_the_first_chunk(
    served_http, prompt_ids, offline_entries
):
    body = {
        "prompt": prompt_ids, "echo": True, "logprobs": 1, "max_tokens": 2, "temperature": 0,
        "ignore_eos": True, "stream": True,
    }  # fmt: skip
    chunks = []
    with httpx.stream("POST", f"{served_http.v1}/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunks.append(json.loads(line.removeprefix("data: "))["choices"][0])
    first = chunks[0]["logprobs"]
    assert len(first["token_logprobs"]) == len(prompt_ids) + 1  # the prompt, then a token
    assert first["token_logprobs"][0] is None
    assert math.isclose(first["token_logprobs"][2], offline_entries[2].logprob, abs_tol=TOLERANCE)
    second = chunks[1]["logprobs"]
    assert len(second["token_logprobs"]) == 1 and second["token_logprobs"][0] is not None
    assert second["text_offset"][0] == len(chunks[0]["text"])
