"""river_bench.draft_replay: the draft length replayed on recorded acceptance and
costs, through the loop's own round bookkeeping (speculative.observe_round)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from river_cpp import RiverModel
from river_cpp.decoding.ngram import DEFAULT_NGRAM_MAX, DEFAULT_NGRAM_MIN

from river_bench import draft_replay
from river_bench.draft_replay import Costs, ngram_offers, record, replay, summarize

VERIFY = {"1": 1.0, "2": 1.5, "3": 1.75, "4": 2.0, "5": 2.1, "6": 2.2, "7": 2.3, "8": 2.4, "9": 2.5}


def _trace(runs: list[int], tokens: list[int], *, n_prompt: int = 1, draft: float = 0.25, sure: float = 0.9) -> dict:
    """One prompt's trace with constant costs: a drafted token `draft`, a one-position
    verify 1.0 (so every replay draws the same), the river's top probability `sure`."""
    return {
        "verify": VERIFY,
        "prompts": [
            {
                "n_prompt": n_prompt,
                "tokens": tokens,
                "runs": runs,
                "confidence": [[sure] * 8 for _ in runs],
                "draft": [draft] * 4,
                "verify_1": [1.0] * 4,
            }
        ],
    }


def test_costs_scale_a_one_position_draw_by_the_curve():
    costs = Costs(_trace([0], [1, 2]), np.random.default_rng(0))
    assert costs.drafts(0) == 0.0 and costs.drafts(3) == pytest.approx(0.75)
    assert costs.verify(1) == 1.0 and costs.verify(3) == 1.75
    assert costs.verify(40) == 2.5  # past the curve: its last size
    assert Costs(_trace([0], [1, 2]), np.random.default_rng(0), ratios=[1.2]).verify(5) == 1.2


def test_fixed_lengths_replay_the_recorded_runs():
    n = 64
    trace = _trace([8] * n, list(range(n + 1)))
    costs = Costs(trace, np.random.default_rng(0))
    length = draft_replay.new_draft_length(draft_replay.Speculative(draft="river", p_min=0.0), adaptive=False)
    assert replay(trace, costs, length, fixed=0) == (n, n * 1.0)  # plain: one verify per token
    # every 4-token draft accepted: 12 rounds of 5 tokens, each 4 drafts and a 5-position
    # verify; then 3 drafts (the room left) and a 4-position verify
    assert replay(trace, costs, length, fixed=4) == (n, pytest.approx(12 * (4 * 0.25 + 2.1) + 3 * 0.25 + 2.0))


def test_adaptive_drafting_pays_where_the_river_is_always_accepted_and_not_where_it_never_is():
    n = 300
    good = summarize(_trace([16] * n, list(range(n + 1))), replays=2, max_draft=8, seed=0, p_min=0.0)
    assert min(good["adaptive"]) > 1.5 and good["acceptance_at_1"] == 1.0
    assert good["fixed"][0] == 1.0 and good["fixed"][4] > 1.5
    bad = summarize(_trace([0] * n, list(range(n + 1))), replays=2, max_draft=8, seed=0, p_min=0.0)
    assert max(bad["adaptive"]) < 1.0 and max(bad["adaptive"]) > 0.85  # probes cost a little
    assert bad["fixed"][4] < 0.5


def test_the_replay_records_every_round_through_the_loops_bookkeeping(monkeypatch):
    rounds = []
    monkeypatch.setattr(draft_replay, "observe_round", lambda length, **round_: rounds.append(round_))
    n = 40
    trace = _trace([2] * n, [7, 8, 9] * 14, n_prompt=1)
    tokens, _ = replay(
        trace,
        Costs(trace, np.random.default_rng(0)),
        draft_replay.new_draft_length(draft_replay.Speculative(), adaptive=True),
        ngrams=[ngram_offers(trace["prompts"][0], DEFAULT_NGRAM_MIN, DEFAULT_NGRAM_MAX, 8)],
    )
    assert sum(r["n_accepted"] + 1 for r in rounds) == tokens
    assert any(r["unused"] for r in rounds)  # the text repeats: n-gram offers are scored


def test_ngram_offers_find_the_repeated_text_and_its_agreement():
    tokens = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 5]
    offers = ngram_offers({"n_prompt": 1, "tokens": tokens, "runs": [0] * 11}, 1, 3, 8)
    assert offers[0] == (0, 0, 0)  # nothing seen before the first token
    # after [1, 2, 3, 4, 1, 2, 3]: the 3-gram [1, 2, 3] was followed by [4, 1, 2, 3, ...],
    # and the backbone goes on [4, 1, 2, 3, 5]
    assert offers[6] == (3, 8, 4)
    assert offers[10][0] == 3 and offers[10][2] == 0  # the proposal's 4 against the backbone's 5


def test_p_min_needs_a_trace_with_top_probabilities():
    trace = _trace([1] * 8, list(range(9)))
    del trace["prompts"][0]["confidence"]
    with pytest.raises(ValueError, match="top probabilities"):
        summarize(trace, replays=1, max_draft=4, seed=0, p_min=0.5)


def test_unsure_drafts_end_the_round():
    n = 200
    sure = summarize(_trace([16] * n, list(range(n + 1))), replays=1, max_draft=8, seed=0, p_min=0.5)
    unsure = summarize(_trace([16] * n, list(range(n + 1)), sure=0.1), replays=1, max_draft=8, seed=0, p_min=0.5)
    assert unsure["adaptive"][0] < sure["adaptive"][0]  # every round ends after one draft


def test_record_on_a_tiny_model(tiny_llama: Path, tmp_path, monkeypatch):
    monkeypatch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path))
    with RiverModel(tiny_llama, river="q4_0", n_ctx=128, n_threads=1, progress=False) as model:
        prompt = model.tokenize("The quick brown fox", add_bos=True)
        trace = record(model, prompt, n_tokens=6, max_run=4, chain=3)
    assert trace["n_prompt"] == len(prompt) and trace["tokens"][: len(prompt)] == prompt
    assert len(trace["runs"]) == len(trace["verify_1"]) == len(trace["tokens"]) - len(prompt)
    assert all(0 <= run <= 4 for run in trace["runs"])
    assert all(1 <= len(chain) <= 3 and all(0.0 < p <= 1.0 for p in chain) for chain in trace["confidence"])


def test_the_ngram_bound_drafts_only_kept_tokens_where_they_pay():
    ratio = {1: 1.0, 2: 1.5, 3: 1.75, 4: 2.0}
    # a kept run of 3 at the first position (4 tokens for 2.0), then two plain steps
    assert draft_replay.ngram_bound([[(3, 3, 3), (0, 0, 0), (0, 0, 0), (0, 0, 0), (0, 0, 0), (0, 0, 0)]], ratio) == (
        pytest.approx(6 / 4.0)
    )
    # one kept token pays for a 2-position verify (2 tokens for 1.5), then a plain step
    assert draft_replay.ngram_bound([[(1, 3, 1), (0, 0, 0), (0, 0, 0)]], ratio) == pytest.approx(3 / 2.5)
    assert draft_replay.ngram_bound([[(0, 0, 0)] * 4], ratio) == 1.0


def test_a_trace_without_a_river_replays_ngram_drafts_alone(tiny_llama: Path, tmp_path, monkeypatch):
    monkeypatch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path))
    with RiverModel(tiny_llama, river=None, n_ctx=128, n_threads=1, progress=False) as model:
        prompt = model.tokenize("The quick brown fox", add_bos=True) * 3
        recorded = record(model, prompt, n_tokens=8, max_run=4, chain=3)
    assert recorded["runs"] == [0] * len(recorded["verify_1"]) and recorded["draft"] == []
    trace = {"verify": VERIFY, "prompts": [recorded]}
    result = summarize(trace, replays=2, max_draft=8, seed=0, drafts="ngram", p_min=0.0)
    assert list(result["fixed"]) == [0]  # fixed lengths are the river's: none here
    assert result["ngram_bound"] >= 1.0 and len(result["adaptive"]) == 2
