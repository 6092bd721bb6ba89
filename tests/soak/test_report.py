"""The soak report's verdicts and Markdown rendering (no daemon needed)."""

from __future__ import annotations

from scripts.soak_suite.report import markdown_table
from scripts.soak_suite.result import ScenarioResult


def test_a_scenario_passes_only_if_every_check_held():
    result = ScenarioResult("aborts")
    assert not result.passed  # no check made: no verdict
    result.check("freed in time", True)
    assert result.passed
    result.check("every abort confirmed", False, "3 of 10")
    assert not result.passed
    assert result.notes == ["every abort confirmed: 3 of 10"]


def test_markdown_names_the_broken_promise_and_the_figures():
    broken = ScenarioResult(
        "connections", counts={"num_connections": 5000, "daemon_returncode": -6}
    )
    broken.check("daemon survives", False)
    held = ScenarioResult("aborts", counts={"num_aborts": 100, "freed_max_ms": 12.5})
    held.check("freed in time", True)
    report = {"scenarios": [broken.finish().to_json(), held.finish().to_json()]}
    rows = markdown_table(report).splitlines()
    assert rows[2] == (
        "| connections | **FAIL**: daemon survives | num_connections 5000; daemon_returncode -6 |"
    )
    assert rows[3] == "| aborts | pass | num_aborts 100; freed_max_ms 12.5 |"
