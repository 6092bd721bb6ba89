"""Incremental detokenization of one request's output, with stop strings.

Streaming needs text as tokens arrive without re-decoding the whole output each step, without
ever emitting half a UTF-8 character, and without emitting text a stop string later claims.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmd.engine.tokenizer import Tokenizer

REPLACEMENT_CHAR = "\ufffd"
NUM_CONTEXT_TOKENS = 4
"""Tokens kept before new ones in the decode window, so decoders that strip a leading space
or join word pieces see the same neighbours as a full decode would."""
MAX_CONTEXT_SEARCH = 8
"""How many extra tokens to look back for a context tail that starts on a character boundary."""
PROMPT_TAIL_TOKENS = 64
"""Prompt tokens decoded once to check the context against (the prompt may be long)."""
MAX_WINDOW_TOKENS = 16
"""Once the window holds this many tokens at a clean character boundary, it is shrunk back
to NUM_CONTEXT_TOKENS; decoding stays O(new tokens) per update."""


@dataclass
class DetokenizerDelta:
    """What one update produced."""

    text: str
    """New text that is safe to emit."""
    stop_string: str | None = None
    """The stop string that matched; all text before it has now been emitted, none after."""


class IncrementalDetokenizer:
    """Turns a request's output token ids into text a few tokens at a time.

    Two layers: a windowed decode (decode the last few tokens plus the new ones and take
    the text beyond what was already produced; hold back a trailing U+FFFD, which marks an
    incomplete character) and a stop-string filter (hold back the longest tail that could
    still begin a stop string). Output text is decoded in the context of the prompt's last
    tokens, so a completion's leading space survives tokenizers that strip it at the start
    of a decode (Llama-2 style); with byte-level BPE it equals `decode(output_ids)` exactly.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_token_ids: list[int],
        skip_special_tokens: bool = True,
        stop: tuple[str, ...] = (),
    ) -> None:
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        self._stop = tuple(stop)
        self._window_ids: list[int] = []
        self._decoded_len = 0
        """Characters of decode(window) already passed on to the stop filter."""
        # The prompt's tail, decoded once, to pick a context starting on a character boundary.
        prompt_tail_ids = list(prompt_token_ids[-PROMPT_TAIL_TOKENS:])
        context_text = self._rebase(prompt_tail_ids, self._decode(prompt_tail_ids))
        # A prompt ending mid-character: the completed character is emitted with the output.
        self._decoded_len = len(context_text.rstrip(REPLACEMENT_CHAR))
        self._held_text = ""
        """Decoded text withheld because it may begin a stop string."""
        self._output_parts: list[str] = []
        self.stop_string: str | None = None
        """The stop string that ended the text, once one matched."""

    @property
    def output_text(self) -> str:
        """All text emitted so far."""
        if len(self._output_parts) > 1:
            self._output_parts = ["".join(self._output_parts)]
        return self._output_parts[0] if self._output_parts else ""

    @property
    def is_stopped(self) -> bool:
        """True once a stop string matched; later updates emit nothing."""
        return self.stop_string is not None

    def update(self, new_token_ids: list[int], exclude_last: bool = False) -> DetokenizerDelta:
        """Add generated token ids and return the text that became safe to emit.

        `exclude_last`: the last id is the EOS or stop token that ended the request; it
        stays in the token ids but is not decoded into the text.
        """
        if exclude_last:
            new_token_ids = new_token_ids[:-1]
        if self.is_stopped or not new_token_ids:
            return DetokenizerDelta("")
        self._window_ids.extend(new_token_ids)
        window_text = self._decode(self._window_ids)
        clean_len = len(window_text.rstrip(REPLACEMENT_CHAR))
        new_text = ""
        if clean_len > self._decoded_len:
            new_text = window_text[self._decoded_len : clean_len]
            self._decoded_len = clean_len
        is_clean = clean_len == len(window_text)  # no incomplete character at the end
        if is_clean and len(self._window_ids) >= MAX_WINDOW_TOKENS:
            # Everything the window decodes to has been produced: keep a short context only.
            self._rebase(self._window_ids, window_text)
        return self._filter(new_text, is_final=False)

    def flush(self) -> str:
        """Emit everything held back (the request ended for another reason than a stop string)."""
        if self.is_stopped:
            return ""
        window_text = self._decode(self._window_ids)
        tail = window_text[self._decoded_len :]
        self._decoded_len = len(window_text)
        return self._filter(tail, is_final=True).text

    def _filter(self, new_text: str, is_final: bool) -> DetokenizerDelta:
        """Apply stop strings to held-back plus new text; return what may be emitted."""
        text = self._held_text + new_text
        self._held_text = ""
        match = self._find_stop(text)
        if match is not None:
            index, stop_string = match
            self.stop_string = stop_string
            return self._emit(text[:index], stop_string)
        if not is_final:
            num_held = self._partial_stop_len(text)
            if num_held:
                self._held_text = text[-num_held:]
                text = text[:-num_held]
        return self._emit(text, None)

    def _emit(self, text: str, stop_string: str | None) -> DetokenizerDelta:
        if text:
            self._output_parts.append(text)
        return DetokenizerDelta(text, stop_string)

    def _find_stop(self, text: str) -> tuple[int, str] | None:
        """The stop-string match in `text` that ends first (ties: the longer one), or None.

        Ending first is what a character-by-character stream would see first, so the result
        does not depend on how tokens were grouped into updates.
        """
        best: tuple[int, int, str] | None = None  # (end, start, stop string)
        for stop_string in self._stop:
            start = text.find(stop_string)
            if start < 0:
                continue
            candidate = (start + len(stop_string), start, stop_string)
            if best is None or candidate[:2] < best[:2]:
                best = candidate
        return None if best is None else (best[1], best[2])

    def _partial_stop_len(self, text: str) -> int:
        """Length of the longest tail of `text` that is a proper prefix of some stop string."""
        longest = 0
        for stop_string in self._stop:
            for length in range(min(len(stop_string) - 1, len(text)), longest, -1):
                if text.endswith(stop_string[:length]):
                    longest = length
                    break
        return longest

    def _rebase(self, token_ids: list[int], text: str) -> str:
        """Make the window a short tail of `token_ids` whose decode is a suffix of `text`.

        A tail that starts inside a character decodes to U+FFFD there (byte-fallback decoders
        even garble the whole run of byte tokens), which `text` does not end with; such
        tails are skipped for a slightly longer or shorter one. The empty tail always fits.
        Returns the new window's text.
        """
        num_ids = len(token_ids)
        preferred = max(num_ids - NUM_CONTEXT_TOKENS, 0)
        longer = range(preferred, max(preferred - MAX_CONTEXT_SEARCH, 0) - 1, -1)
        for start in (*longer, *range(preferred + 1, num_ids + 1)):
            tail_text = self._decode(token_ids[start:]) if start < num_ids else ""
            if text.endswith(tail_text):
                self._window_ids = token_ids[start:]
                self._decoded_len = len(tail_text)
                return tail_text
        raise AssertionError("unreachable: the empty tail always fits")

    def _decode(self, token_ids: list[int]) -> str:
        return self._tokenizer.decode(token_ids, skip_special_tokens=self._skip_special_tokens)
