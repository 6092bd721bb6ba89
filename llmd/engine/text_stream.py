"""One request's output text as tokens arrive: the rules the offline API and the daemon share.

A final EOS or stop token id is not text, a matched stop string ends the text before it,
and the last update flushes what the detokenizer held back; written once, so `LLM` and
`llmd serve` cannot end a request's text differently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from llmd.engine.detokenizer import DetokenizerDelta
from llmd.engine.request import FinishReason


class Detokenizer(Protocol):
    """What a text stream needs of a detokenizer (IncrementalDetokenizer, or no text)."""

    @property
    def output_text(self) -> str:
        """All text emitted so far."""
        ...

    def update(self, new_token_ids: list[int], exclude_last: bool = False) -> DetokenizerDelta:
        """Text that became safe to show, and the stop string if one matched."""
        ...

    def flush(self) -> str:
        """What was held back, at the end of the request."""
        ...


@dataclass(frozen=True)
class TextStep:
    """What one update of a request's tokens gave."""

    text: str
    """New text to show."""
    stop_string: str | None
    """The stop string this update matched: the request must end here (its text has)."""
    num_tokens_kept: int
    """The update's tokens up to the one whose text completed the stop string (all of them
    without a stop string): the tokens after it were never delivered."""


def is_ended_on_token(finish_reason: FinishReason | None, stop_reason: object) -> bool:
    """True when generation ended on EOS or a stop token id, whose text is not shown."""
    return finish_reason is FinishReason.STOP and not isinstance(stop_reason, str)


class TextStream:
    """The text of one request, update by update, and the stop string that ended it."""

    def __init__(self, detokenizer: Detokenizer) -> None:
        self.detokenizer = detokenizer
        self.stop_string: str | None = None
        """The stop string that ended the text, once one matched."""

    @property
    def text(self) -> str:
        """All text shown so far."""
        return self.detokenizer.output_text

    def advance(
        self, new_token_ids: list[int], is_finished: bool, is_ended_on_token: bool
    ) -> TextStep:
        """Take one update's tokens; `is_finished`: the engine ended the request with them.

        Several tokens (a speculative step's accepted run) go in one at a time, so that a
        stop string ends the text, and the tokens kept, where it would have one by one.
        """
        num_tokens = len(new_token_ids)
        if num_tokens <= 1:
            return self._advance(new_token_ids, is_finished, is_ended_on_token)
        texts = []
        for index in range(num_tokens):
            is_last = index == num_tokens - 1
            step = self._advance(
                new_token_ids[index : index + 1], is_finished and is_last,
                is_ended_on_token and is_last,
            )  # fmt: skip
            texts.append(step.text)
            if step.stop_string is not None:
                return TextStep("".join(texts), step.stop_string, index + 1)
        return TextStep("".join(texts), None, num_tokens)

    def _advance(
        self, new_token_ids: list[int], is_finished: bool, is_ended_on_token: bool
    ) -> TextStep:
        delta = self.detokenizer.update(new_token_ids, exclude_last=is_ended_on_token)
        text = delta.text
        if delta.stop_string is not None:
            self.stop_string = delta.stop_string
        elif is_finished:
            text += self.detokenizer.flush()
        return TextStep(text, delta.stop_string, len(new_token_ids))

    def final_reasons(
        self, finish_reason: str, stop_reason: int | str | None
    ) -> tuple[str, int | str | None]:
        """The request's finish and stop reasons, a matched stop string winning."""
        if self.stop_string is not None:
            return FinishReason.STOP.value, self.stop_string
        return finish_reason, stop_reason
