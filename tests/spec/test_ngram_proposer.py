"""The n-gram (prompt-lookup) proposer: which match it copies from, and how much."""

from __future__ import annotations

import pytest

from llmd.spec.ngram_proposer import NgramProposer


def test_it_copies_what_followed_the_latest_earlier_match():
    proposer = NgramProposer(min_n=2, max_n=3)
    # "7 8" occurs at 0 (then 1, 2) and at 4 (then 9, 3); the latest earlier one wins.
    tokens = [7, 8, 1, 2, 7, 8, 9, 3, 5, 7, 8]
    assert proposer.propose(tokens, 3) == [9, 3, 5]
    assert proposer.propose(tokens, 1) == [9]


def test_a_match_with_too_few_tokens_after_it_yields_to_the_earliest():
    proposer = NgramProposer(min_n=2, max_n=2)
    # "1 2" at 0 (then 3 4 5 6) and at 6 (then only 9 1 2: the suffix itself).
    tokens = [1, 2, 3, 4, 5, 6, 1, 2, 9, 1, 2]
    assert proposer.propose(tokens, 4) == [3, 4, 5, 6]
    assert proposer.propose(tokens, 3) == [9, 1, 2]


def test_a_longer_suffix_match_is_preferred_over_a_later_shorter_one():
    proposer = NgramProposer(min_n=1, max_n=3)
    # Suffix 4 5 6 occurs once (then 10); "6" alone occurs later too (then 11).
    tokens = [4, 5, 6, 10, 6, 11, 4, 5, 6]
    assert proposer.propose(tokens, 2) == [10, 6]


def test_the_draft_stops_at_the_end_of_the_tokens():
    proposer = NgramProposer(min_n=2, max_n=2)
    tokens = [1, 2, 3, 1, 2]
    assert proposer.propose(tokens, 5) == [3, 1, 2]


def test_a_repeated_run_proposes_more_of_the_run():
    proposer = NgramProposer(min_n=2, max_n=4)
    assert proposer.propose([9] * 6, 3) == [9, 9]  # n = 4 matches at 0 first


@pytest.mark.parametrize(
    ("tokens", "max_num_tokens"),
    [([1, 2, 3, 4, 5], 3), ([1, 2], 3), ([1, 2, 1, 2], 0), ([], 3), ([5], 2)],
)
def test_no_match_or_no_room_proposes_nothing(tokens, max_num_tokens):
    assert NgramProposer(min_n=2, max_n=4).propose(tokens, max_num_tokens) == []


def test_matches_shorter_than_min_n_are_not_used():
    tokens = [3, 1, 2, 4, 8, 2]  # only "2" (n = 1) recurs
    assert NgramProposer(min_n=2, max_n=3).propose(tokens, 2) == []
    assert NgramProposer(min_n=1, max_n=3).propose(tokens, 2) == [4, 8]
