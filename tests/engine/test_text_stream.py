"""The text rules `LLM` and the daemon share: stop strings, flushes, final reasons."""

from __future__ import annotations

from llmd.engine.detokenizer import DetokenizerDelta
from llmd.engine.request import FinishReason
from llmd.engine.text_stream import TextStream, is_ended_on_token


class ScriptedDetokenizer:
    """Gives the scripted deltas in order and holds back `held` for the flush."""

    def __init__(self, deltas: list[DetokenizerDelta], held: str = "") -> None:
        self.deltas = deltas
        self.held = held
        self.output_text = ""
        self.exclude_last_seen: list[bool] = []

    def update(self, new_token_ids: list[int], exclude_last: bool = False) -> DetokenizerDelta:
        self.exclude_last_seen.append(exclude_last)
        delta = self.deltas.pop(0)
        self.output_text += delta.text
        return delta

    def flush(self) -> str:
        held, self.held = self.held, ""
        self.output_text += held
        return held


def test_the_last_update_flushes_what_was_held_back():
    stream = TextStream(ScriptedDetokenizer([DetokenizerDelta("He"), DetokenizerDelta("l")], "lo"))
    assert stream.advance([1], is_finished=False, is_ended_on_token=False).text == "He"
    step = stream.advance([2], is_finished=True, is_ended_on_token=False)
    assert (step.text, step.stop_string) == ("llo", None)
    assert stream.text == "Hello"
    assert stream.final_reasons("length", None) == ("length", None)


def test_a_stop_string_ends_the_text_without_a_flush_and_wins_the_reasons():
    detokenizer = ScriptedDetokenizer([DetokenizerDelta("Hi", stop_string="END")], "junk")
    stream = TextStream(detokenizer)
    step = stream.advance([1, 2], is_finished=True, is_ended_on_token=False)
    assert (step.text, step.stop_string) == ("Hi", "END")
    assert stream.text == "Hi" and detokenizer.held == "junk"  # nothing past the stop
    assert stream.final_reasons("length", None) == ("stop", "END")


def test_an_ending_token_is_left_out_of_the_text():
    assert is_ended_on_token(FinishReason.STOP, 2)  # EOS / stop token id
    assert is_ended_on_token(FinishReason.STOP, None)
    assert not is_ended_on_token(FinishReason.STOP, "END")  # a stop string
    assert not is_ended_on_token(FinishReason.LENGTH, None)
    assert not is_ended_on_token(None, None)
    detokenizer = ScriptedDetokenizer([DetokenizerDelta("x")])
    TextStream(detokenizer).advance([7], is_finished=True, is_ended_on_token=True)
    assert detokenizer.exclude_last_seen == [True]


def test_a_run_of_tokens_goes_in_one_at_a_time_and_a_stop_keeps_its_tokens_only():
    """A speculative step's accepted run: the stop string's token is the last one kept."""
    deltas = [DetokenizerDelta("a"), DetokenizerDelta("b", stop_string="S")]
    detokenizer = ScriptedDetokenizer(deltas + [DetokenizerDelta("never")])
    step = TextStream(detokenizer).advance([1, 2, 3, 4], is_finished=True, is_ended_on_token=True)
    assert (step.text, step.stop_string, step.num_tokens_kept) == ("ab", "S", 2)
    assert detokenizer.exclude_last_seen == [False, False]  # the ending token was not reached
    detokenizer = ScriptedDetokenizer([DetokenizerDelta("x"), DetokenizerDelta("y")], "z")
    step = TextStream(detokenizer).advance([1, 2], is_finished=True, is_ended_on_token=True)
    assert (step.text, step.stop_string, step.num_tokens_kept) == ("xyz", None, 2)
    assert detokenizer.exclude_last_seen == [False, True]  # only the run's last token ends it
