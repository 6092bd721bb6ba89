"""A thin wrapper over a Hugging Face fast tokenizer: encode, decode, chat templates, EOS ids.

The engine, the detokenizer and the offline API need one small, validated surface (typed
errors, a merged set of EOS ids, decode without clean-up) instead of transformers' many knobs.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from llmd.errors import InvalidParameterError, ModelNotFoundError
from llmd.tools.chat_prompt import chat_prompt_text
from llmd.tools.parser_choice import DEFAULT_PARSER

GENERATION_CONFIG_FILE = "generation_config.json"


class Tokenizer:
    """Encodes prompts and chat messages and decodes token ids for one model."""

    def __init__(self, hf_tokenizer: Any, name: str, extra_eos_token_ids: tuple[int, ...] = ()):
        self.hf_tokenizer = hf_tokenizer
        """The underlying transformers tokenizer."""
        self.name = name
        """The path or hub id it was loaded from."""
        self._backend = getattr(hf_tokenizer, "backend_tokenizer", None)
        eos_ids: list[int] = []
        for token_id in (hf_tokenizer.eos_token_id, *extra_eos_token_ids):
            if token_id is not None and token_id not in eos_ids:
                eos_ids.append(int(token_id))
        self.eos_token_ids: tuple[int, ...] = tuple(eos_ids)
        """The tokenizer's EOS id and generation_config.json's, deduplicated, in that order."""
        self.vocab_size: int = len(hf_tokenizer)
        """Number of token ids the tokenizer knows, added tokens included (the model may pad)."""

    @property
    def bos_token_id(self) -> int | None:
        """The beginning-of-sequence token id, if the tokenizer has one."""
        return self.hf_tokenizer.bos_token_id

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`, with BOS (or other special tokens) where the tokenizer adds
        them, unless `add_special_tokens` is False."""
        if not isinstance(text, str):
            raise InvalidParameterError(f"must be a string, got {type(text).__name__}", "prompt")
        return list(self.hf_tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        """Text of `token_ids`, never applying transformers' tokenization-space clean-up."""
        if self._backend is not None:
            return self._backend.decode(token_ids, skip_special_tokens=skip_special_tokens)
        return self.hf_tokenizer.decode(
            token_ids,
            skip_special_tokens=skip_special_tokens,
            clean_up_tokenization_spaces=False,
        )

    def to_json(self) -> str:
        """The fast tokenizer's own JSON (tokenizer.json, added tokens included), without
        padding or truncation: what a grammar backend needs to map text onto token ids."""
        if self._backend is None:
            raise InvalidParameterError(
                f"tokenizer {self.name!r} is not a fast tokenizer", "structured_outputs"
            )
        backend = copy.copy(self._backend)
        backend.no_padding()
        backend.no_truncation()
        return backend.to_str()

    def convert_ids_to_tokens(self, token_ids: list[int]) -> list[str]:
        """The vocabulary strings of `token_ids` (for showing logprob alternatives)."""
        return list(self.hf_tokenizer.convert_ids_to_tokens(token_ids))

    @property
    def has_chat_template(self) -> bool:
        """True when the tokenizer ships a chat template."""
        return bool(getattr(self.hf_tokenizer, "chat_template", None))

    @property
    def chat_template_text(self) -> str | None:
        """The chat template's source (named templates joined), or None without one."""
        template = getattr(self.hf_tokenizer, "chat_template", None)
        if isinstance(template, dict):
            return "\n".join(str(text) for text in template.values())
        return template if isinstance(template, str) else None

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
        tool_call_parser: str = DEFAULT_PARSER,
    ) -> list[int]:
        """Render `messages` (and `tools`) with the model's chat template: the prompt's ids.

        A template that ignores tools gets them, and earlier tool turns, as plain text in
        `tool_call_parser`'s format (llmd/tools/chat_prompt.py).
        """
        _validate_messages(messages)
        if not self.has_chat_template:
            raise InvalidParameterError(
                f"tokenizer {self.name!r} has no chat template; send a plain prompt", "messages"
            )

        def render(turns: list[dict[str, Any]], turn_tools: list[dict[str, Any]] | None) -> str:
            return self.render_chat(turns, turn_tools, add_generation_prompt)

        text = chat_prompt_text(render, messages, tools, tool_call_parser)
        # The template writes BOS itself when it wants one; adding it again would duplicate it.
        return list(self.hf_tokenizer.encode(text, add_special_tokens=False))

    def render_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """The chat template's text for `messages` and `tools`; a refusal names `messages`."""
        from jinja2 import TemplateError

        try:
            text = self.hf_tokenizer.apply_chat_template(
                messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt
            )
        except (TemplateError, TypeError, ValueError, KeyError) as error:
            message = f"chat template rejected them: {error}"
            raise InvalidParameterError(message, "messages") from None
        return str(text)

    def __repr__(self) -> str:
        return f"Tokenizer({self.name!r}, vocab_size={self.vocab_size}, eos={self.eos_token_ids})"


def load_tokenizer(path_or_id: str, model_path: str | None = None) -> Tokenizer:
    """Load a fast tokenizer (never remote code) and merge in `model_path`'s generation EOS ids.

    `model_path` defaults to `path_or_id`; its generation_config.json (local dir, or the hub
    cache for an id) may list EOS ids beyond the tokenizer's own, e.g. Llama-3's <|eot_id|>.
    """
    from transformers import AutoTokenizer

    path_or_id = str(path_or_id)
    source = os.path.expanduser(path_or_id)
    looks_local = path_or_id.startswith(("/", "./", "../", "~")) or os.path.exists(source)
    if looks_local and not os.path.isdir(source):
        raise ModelNotFoundError(f"no such directory: {path_or_id!r}", "tokenizer")
    try:
        hf_tokenizer = AutoTokenizer.from_pretrained(source, use_fast=True, trust_remote_code=False)
    except (OSError, ValueError) as error:
        raise ModelNotFoundError(
            f"cannot load a tokenizer from {path_or_id!r}: {error}", "tokenizer"
        ) from None
    extra_eos_ids = read_generation_eos_token_ids(os.path.expanduser(model_path or path_or_id))
    return Tokenizer(hf_tokenizer, path_or_id, extra_eos_ids)


def load_model_tokenizer(
    model_path: object, hf_config: object, tokenizer: str | None, skip_tokenizer_init: bool
) -> tuple[Tokenizer | None, tuple[int, ...]]:
    """An engine's tokenizer (`tokenizer`, else the model's own; None when skipped) and its
    EOS ids (without a tokenizer: from the model's config and generation config)."""
    if skip_tokenizer_init:
        return None, config_eos_token_ids(hf_config, model_path)
    loaded = load_tokenizer(tokenizer or str(model_path), str(model_path))
    return loaded, loaded.eos_token_ids


def config_eos_token_ids(hf_config: object, model_path: object) -> tuple[int, ...]:
    """EOS ids from the model config and generation config, for engines without a tokenizer."""
    eos = getattr(hf_config, "eos_token_id", None)
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    for token_id in read_generation_eos_token_ids(str(model_path)):
        if token_id not in ids:
            ids.append(token_id)
    return tuple(ids)


def read_generation_eos_token_ids(path_or_id: str) -> tuple[int, ...]:
    """EOS ids from generation_config.json (an int or a list), or () when there is none."""
    config_path = _find_generation_config(path_or_id)
    if config_path is None:
        return ()
    try:
        config = json.loads(Path(config_path).read_text())
    except (OSError, ValueError):
        return ()
    eos = config.get("eos_token_id") if isinstance(config, dict) else None
    if isinstance(eos, int) and not isinstance(eos, bool):
        return (eos,)
    if isinstance(eos, list):
        return tuple(i for i in eos if isinstance(i, int) and not isinstance(i, bool))
    return ()


def _find_generation_config(path_or_id: str) -> str | None:
    if os.path.isdir(path_or_id):
        candidate = os.path.join(path_or_id, GENERATION_CONFIG_FILE)
        return candidate if os.path.isfile(candidate) else None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        cached = try_to_load_from_cache(path_or_id, GENERATION_CONFIG_FILE)
    except ValueError:  # not a valid repo id
        return None
    return cached if isinstance(cached, str) else None


def _validate_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise InvalidParameterError("must be a non-empty list of messages", "messages")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidParameterError(f"message {index} must be a map", "messages")
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not role:
            raise InvalidParameterError(
                f"message {index} needs a non-empty string 'role'", "messages"
            )
        if not isinstance(content, str):
            raise InvalidParameterError(f"message {index} needs a string 'content'", "messages")
