"""The soak and fault suite: scenarios that drive real `llmd serve` processes and count.

Each scenario returns a `ScenarioResult` (pass/fail against its figure plus the counts
behind it); `scripts/soak.py` runs them from the command line and tests/soak/ runs them
with reduced counts, so the CLI and CI share one implementation.
"""
