"""The capacity search against fake attainment curves: bracketing, bisection, edge cases."""

from __future__ import annotations

import random

import pytest

from llmd.bench.capacity import (
    CapacityOptions,
    Probe,
    capacity_line,
    find_capacity,
    render_probes,
)
from llmd.bench.datasets import random_sessions, shared_prefix_sessions
from llmd.bench.serve import shifted_sessions
from llmd.errors import InvalidParameterError

SLO_MS = {"ttft": 500.0, "tpot": 50.0, "e2e": None}


def _step(threshold_rps: float):
    """All requests meet the SLO below the threshold rate, none at or above it."""
    return lambda rate: Probe(rate, 1.0 if rate < threshold_rps else 0.0)


def _check_consistent(capacity, threshold=0.9):
    """Capacity is the highest passing probe; every probe above it failed."""
    passing = [p.rate_rps for p in capacity.probes if p.passes(threshold)]
    assert capacity.rate_rps == (max(passing) if passing else 0.0)
    assert all(not p.passes(threshold) for p in capacity.probes if p.rate_rps > capacity.rate_rps)
    assert len({p.rate_rps for p in capacity.probes}) == len(capacity.probes)  # no rate twice


@pytest.mark.parametrize("threshold_rps", [1.3, 3.7, 10.0, 47.0, 200.0])
def test_bisection_finds_a_known_threshold_within_the_tolerance(threshold_rps):
    options = CapacityOptions(max_probes=30)
    capacity = find_capacity(_step(threshold_rps), options)
    assert capacity.is_bracketed and capacity.is_converged
    assert capacity.rate_rps < threshold_rps <= capacity.failing_rate_rps
    assert capacity.failing_rate_rps / capacity.rate_rps <= 1 + options.relative_tolerance
    _check_consistent(capacity)


def test_bracketing_doubles_from_the_lowest_rate_until_a_rate_fails():
    capacity = find_capacity(_step(5.0), CapacityOptions(max_probes=30))
    assert [p.rate_rps for p in capacity.probes[:4]] == [1.0, 2.0, 4.0, 8.0]
    assert all(4.0 < p.rate_rps < 8.0 for p in capacity.probes[4:])  # then bisects inside


def test_given_bounds_jump_straight_to_the_highest_rate():
    options = CapacityOptions(min_rate_rps=0.5, max_rate_rps=64.0, max_probes=30)
    capacity = find_capacity(_step(9.0), options)
    assert [p.rate_rps for p in capacity.probes[:2]] == [0.5, 64.0]
    assert capacity.rate_rps < 9.0 <= capacity.failing_rate_rps
    _check_consistent(capacity)


def test_partial_attainment_is_judged_against_the_threshold():
    def linear(rate):  # attainment falls from 1 at 0 req/s to 0 at 20 req/s
        return Probe(rate, max(0.0, 1 - rate / 20))

    capacity = find_capacity(linear, CapacityOptions(attainment_threshold=0.75, max_probes=30))
    assert capacity.rate_rps <= 5.0 < capacity.failing_rate_rps  # 75% met up to 5 req/s
    assert capacity.failing_rate_rps <= 5.0 * 1.1
    _check_consistent(capacity, 0.75)


def test_noisy_but_monotone_attainment_lands_near_the_true_capacity():
    for seed in range(20):
        rng = random.Random(seed)

        def noisy(rate, rng=rng):  # true attainment 0.9 at 8 req/s, noise of +-0.03
            return Probe(rate, min(1.0, max(0.0, 1.3 - 0.05 * rate + rng.uniform(-0.03, 0.03))))

        # Only rates in 7.4..8.6 can go either way: the answer passed, so it is at most 8.6,
        # and it is within the 10% tolerance below a failing rate of at least 7.4.
        capacity = find_capacity(noisy, CapacityOptions(max_probes=30))
        assert 7.4 / 1.1 <= capacity.rate_rps <= 8.6 and capacity.is_converged
        _check_consistent(capacity)


def test_always_failing_gives_zero_with_a_note():
    capacity = find_capacity(lambda rate: Probe(rate, 0.5), CapacityOptions(min_rate_rps=0.25))
    assert capacity.rate_rps == 0.0 and not capacity.is_bracketed
    assert [p.rate_rps for p in capacity.probes] == [0.25]
    assert capacity.failing_rate_rps == 0.25
    assert "even the lowest rate, 0.25 req/s, fails" in capacity.note
    line = capacity_line(capacity.to_json(SLO_MS))
    assert line.startswith("capacity at SLO: 0 req/s (90% within TTFT<=500ms TPOT<=50ms;")


def test_a_run_with_no_requests_fails():
    capacity = find_capacity(lambda rate: Probe(rate, None), CapacityOptions())
    assert capacity.rate_rps == 0.0


def test_always_passing_is_a_lower_bound_at_the_highest_rate():
    options = CapacityOptions(min_rate_rps=1.0, max_rate_rps=16.0)
    capacity = find_capacity(lambda rate: Probe(rate, 1.0), options)
    assert capacity.rate_rps == 16.0 and not capacity.is_bracketed
    assert capacity.failing_rate_rps is None
    assert [p.rate_rps for p in capacity.probes] == [1.0, 16.0]
    line = capacity_line(capacity.to_json(SLO_MS))
    assert line.startswith("capacity at SLO: >= 16 req/s")
    assert "raise --capacity-max-rate" in line


def test_always_passing_without_a_highest_rate_stops_at_max_probes():
    capacity = find_capacity(lambda rate: Probe(rate, 1.0), CapacityOptions(max_probes=4))
    assert [p.rate_rps for p in capacity.probes] == [1.0, 2.0, 4.0, 8.0]
    assert capacity.rate_rps == 8.0 and not capacity.is_bracketed
    assert "at least 8 req/s" in capacity.note


def test_max_probes_cuts_the_bisection_short_and_says_so():
    capacity = find_capacity(_step(5.0), CapacityOptions(max_probes=5))
    assert len(capacity.probes) == 5
    assert capacity.is_bracketed and not capacity.is_converged
    assert capacity.rate_rps < 5.0 <= capacity.failing_rate_rps
    assert "stopped after 5 probes" in capacity.note


def test_json_lists_every_probe_with_its_verdict():
    capacity = find_capacity(_step(3.0), CapacityOptions(max_probes=30))
    data = capacity.to_json(SLO_MS)
    assert data["rate_rps"] == capacity.rate_rps and data["attainment_threshold"] == 0.9
    assert data["slo_ms"] == SLO_MS and data["is_bracketed"] is True
    assert [p["passed"] for p in data["probes"]] == [p.attainment == 1.0 for p in capacity.probes]
    assert set(data["probes"][0]) >= {"rate_rps", "attainment", "goodput_rps", "ttft_p99_ms",
                                      "tpot_p99_ms", "passed"}  # fmt: skip
    table = render_probes(data)
    assert len(table.splitlines()) == len(data["probes"]) + 1 and "pass" in table


@pytest.mark.parametrize(
    ("fields", "parameter"),
    [
        (dict(attainment_threshold=0.0), "attainment_threshold"),
        (dict(attainment_threshold=1.01), "attainment_threshold"),
        (dict(min_rate_rps=0.0), "min_rate_rps"),
        (dict(min_rate_rps=float("inf")), "min_rate_rps"),
        (dict(min_rate_rps=4.0, max_rate_rps=4.0), "max_rate_rps"),
        (dict(max_rate_rps=float("inf")), "max_rate_rps"),
        (dict(relative_tolerance=0.0), "relative_tolerance"),
        (dict(max_probes=1), "max_probes"),
    ],
)
def test_bounds_are_validated_with_the_field_named(fields, parameter):
    with pytest.raises(InvalidParameterError) as caught:
        CapacityOptions(**fields)
    assert caught.value.parameter == parameter


def test_an_attainment_of_one_is_allowed():
    capacity = find_capacity(_step(2.0), CapacityOptions(attainment_threshold=1.0))
    assert 1.0 <= capacity.rate_rps < 2.0


def test_shifted_prompts_keep_lengths_and_shared_prefixes_but_change_every_id():
    sessions = shared_prefix_sessions(6, 2, 16, 4, output_len=3, vocab_size=50, seed=1)
    moved = shifted_sessions(sessions, 1, 50)
    for before, after in zip(sessions, moved):
        old, new = before.turns[0], after.turns[0]
        assert len(old.prompt_token_ids) == len(new.prompt_token_ids)
        assert old.max_tokens == new.max_tokens
        assert all(a != b and 10 <= b < 50 for a, b in zip(old.prompt_token_ids,
                                                            new.prompt_token_ids))  # fmt: skip
    prefixes = {s.turns[0].prompt_token_ids[:16] for s in moved}
    assert len(prefixes) == 2  # the two groups still share their prefixes
    assert shifted_sessions(sessions, 0, 50) is sessions
    plain = random_sessions(3, 8, 2, 0.0, vocab_size=50)
    assert shifted_sessions(plain, 40, 50)[0].turns[0].prompt_token_ids == tuple(
        10 + (t - 10 + 40) % 40 for t in plain[0].turns[0].prompt_token_ids
    )
