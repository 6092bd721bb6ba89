"""The default model shipped in the package loads like any checkpoint and matches HF."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from llmd import LLM, SamplingParams
from llmd.config import default_model_dir

CHAT_PROMPTS = [
    [{"role": "user", "content": "Who are you?"}],
    [{"role": "user", "content": "What is the capital of Japan?"}],
]
TEXT_PROMPTS = ["Once upon a time, there was a little", "The cat sat on the"]


@pytest.fixture(scope="module")
def default_llm():
    llm = LLM(device="cpu", dtype="float32")  # no model given: the shipped default
    assert llm.engine.model_path.resolve() == Path(default_model_dir())
    return llm


def test_default_model_greedy_equals_hf(default_llm):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = default_model_dir()
    hf_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    hf_tokenizer = AutoTokenizer.from_pretrained(path)
    prompts = [hf_tokenizer(text)["input_ids"] for text in TEXT_PROMPTS]
    for chat in CHAT_PROMPTS:
        text = hf_tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        prompts.append(hf_tokenizer(text, add_special_tokens=False)["input_ids"])
    expected = []
    with torch.no_grad():
        for prompt in prompts:
            output = hf_model.generate(
                torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=1,
            )  # fmt: skip
            expected.append(output[0, len(prompt) :].tolist())
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    assert [out.token_ids for out in default_llm.generate(prompts, params)] == expected


def test_default_model_answers_in_english_and_stops(default_llm):
    reply = default_llm.chat(CHAT_PROMPTS[0], SamplingParams(temperature=0.0, max_tokens=64))[0]
    assert reply.finish_reason == "stop"  # ends on <|end|>, an EOS id from generation_config
    assert "<|end|>" not in reply.text
    assert "model" in reply.text.lower()
