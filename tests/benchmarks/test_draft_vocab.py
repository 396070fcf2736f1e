"""river_bench.draft_vocab: the share of output tokens a head over some rows covers."""

from __future__ import annotations

import pytest

from river_bench.draft_vocab import coverage


def test_coverage_counts_output_tokens_in_the_rows():
    runs = [([1, 2], [3, 4, 9, 3]), ([5], [6])]
    assert coverage(runs, {3, 6}, False) == pytest.approx(3 / 5)
    assert coverage(runs, set(), False) == 0.0
    assert coverage([], {1}, False) == 0.0


def test_with_context_every_token_seen_before_counts():
    runs = [([1, 2], [2, 7, 7, 8])]  # 2 is in the prompt, the second 7 follows the first
    assert coverage(runs, set(), True) == pytest.approx(2 / 4)
    assert coverage(runs, {8}, True) == pytest.approx(3 / 4)
