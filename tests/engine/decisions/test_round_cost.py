"""river_cpp.engine.decisions.round_cost: what a drafted round yields and costs."""

from __future__ import annotations

import pytest

from river_cpp.engine.decisions.river_choice import Timings
from river_cpp.engine.decisions.round_cost import best_round, expected_accepted, round_rate


def test_expected_accepted_sums_the_chances_of_each_draft_surviving():
    # the first draft is kept with a, the second with a * a, ...
    assert expected_accepted(0.5, 1) == pytest.approx(0.5)
    assert expected_accepted(0.5, 3) == pytest.approx(0.5 + 0.25 + 0.125)
    assert expected_accepted(0.0, 5) == 0.0
    assert expected_accepted(1.0, 4) == pytest.approx(4, rel=0.01)  # capped below 1, not a division by 0


def test_a_round_emits_its_kept_drafts_and_the_backbones_token():
    # 2 drafts at a = 0.5 keep 0.75 on average, plus 1, for 2 * 0.1 + 0.5 of cost
    assert round_rate(0.5, 2, 0.1, 0.5) == pytest.approx(1.75 / 0.7)


def test_best_round_is_plain_where_no_length_pays():
    steep = Timings({1: 1.0, 2: 1.6, 4: 1.7, 6: 2.5, 9: 2.6})  # a 4-bit backbone on 2 cores
    assert best_round(0.9, 0.9, steep.verify_cost) == (0, 1.0)
    k, speedup = best_round(1.0, 0.0, lambda n: 1.0)  # free drafts, always kept, free verify
    assert k == 8 and speedup == pytest.approx(9.0, rel=0.01)
    assert best_round(1.0, 0.0, lambda n: 1.0, max_draft=3)[0] == 3
