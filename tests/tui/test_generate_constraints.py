"""`llmd generate` with an output constraint: through a daemon and in-process, each answer
satisfies it, and a bad or doubled constraint is one `Error:` line before anything runs."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from llmd.cli import main
from tests.structured.constraints import ANSWERS, PERSON, PHONE, check_output

GRAMMAR = 'start: "x=" /[0-9]/ ("," /[0-9]/)?'


def _generate(*args: str):
    result = CliRunner().invoke(main, ["generate", "--max-tokens", "120", *args])
    assert result.exit_code == 0, result.output
    return result.stdout.removesuffix("\n")


@pytest.mark.slow
def test_each_flag_constrains_the_daemons_answer(daemon_address, tmp_path):
    schema_path = tmp_path / "person.json"
    schema_path.write_text(json.dumps(PERSON))
    grammar_path = tmp_path / "pairs.lark"
    grammar_path.write_text(GRAMMAR)
    remote = ("--address", daemon_address, "--temperature", "1", "--sampling-seed", "5")
    free = _generate(*remote, "Tell me about")
    cases = [
        (["--choice", ",".join(ANSWERS[:2]), "--choice", ANSWERS[2]], {"choice": ANSWERS}),
        (["--regex", PHONE], {"regex": PHONE}),
        (["--json-schema", str(schema_path)], {"json": PERSON}),
        (["--grammar", str(grammar_path)], {"regex": "x=[0-9](,[0-9])?"}),
    ]
    for flags, spec in cases:
        check_output(spec, _generate(*remote, *flags, "Tell me about"))
        with pytest.raises(AssertionError):  # the same request unconstrained fails the check
            check_output(spec, free)
    text = _generate(*remote, "--json-object", "--max-tokens", "60", "Tell me about")
    assert text.startswith("{")


@pytest.mark.slow
def test_local_generate_takes_the_same_flags(tiny_model_dir):
    local = ("--model", str(tiny_model_dir), "--num-blocks", "64")
    assert _generate(*local, "--choice", "red,green,blue", "Pick") in ("red", "green", "blue")
    check_output({"regex": PHONE}, _generate(*local, "--regex", PHONE, "Call"))


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--regex", "a", "--choice", "a,b"], "give at most one of --json-schema, --json-object, "
         "--regex, --choice, --grammar; got --regex and --choice"),
        (["--json-object", "--grammar", "g.lark"], "give at most one of"),
        (["--regex", "a(b"], "--regex: is invalid or not supported"),
        (["--choice", "a,,b"], "--choice: entries must be non-empty strings"),
        (["--json-schema", "no-such-file.json"], "--json-schema: cannot read no-such-file.json"),
        (["--json-schema", "BAD_JSON"], "--json-schema: is not valid JSON"),
        (["--json-schema", "BAD_SCHEMA"], "--json-schema: is invalid or not supported"),
        (["--grammar", "BAD_GRAMMAR"], "--grammar: is invalid or not supported"),
        (["--regex", "a", "--ignore-eos"], "--ignore-eos: cannot be combined"),
    ],
)  # fmt: skip
def test_a_bad_constraint_is_one_error_line_naming_its_flag(flags, expected, tmp_path):
    files = {"BAD_JSON": '{"type": ', "BAD_SCHEMA": '{"type": "strng"}', "BAD_GRAMMAR": "start: x"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    flags = [str(tmp_path / flag) if flag in files else flag for flag in flags]
    address = f"ipc://{tmp_path / 'none.sock'}"  # no daemon: nothing may be asked of one
    result = CliRunner().invoke(main, ["generate", "--address", address, *flags, "hi"])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.output.startswith(f"Error: {expected}"), result.output
    assert "Traceback" not in result.output
