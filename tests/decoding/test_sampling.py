"""river_cpp.decoding.sampling: parameter checks, each stage's support, llama.cpp's repeat penalty."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pytest

from river_cpp.decoding.sampling import (
    NoLegalToken,
    Sampler,
    SamplingParams,
    apply_penalties,
    apply_repeat_penalty,
    typical,
)

N_VOCAB = 1000
N_DRAWS = 400


def draws(params: SamplingParams, logits: np.ndarray, history: Sequence[int] = (), n: int = N_DRAWS) -> list[int]:
    sampler = Sampler(params)
    return [sampler(logits, history) for _ in range(n)]


@pytest.fixture
def logits() -> np.ndarray:
    """Random logits whose ranking is known: token i has the i-th largest logit, 0 first."""
    values = np.sort(np.random.default_rng(0).normal(0.0, 3.0, N_VOCAB))[::-1]
    return values.astype(np.float32)


def probabilities(logits: np.ndarray) -> np.ndarray:
    p = np.exp(logits.astype(np.float64) - logits.max())
    return p / p.sum()


# ---------------------------------------------------------------- params


@pytest.mark.parametrize(
    "options",
    [
        {"temperature": -0.1},
        {"temperature": float("nan")},
        {"temperature": float("inf")},
        {"temperature": "hot"},
        {"top_k": -1},
        {"top_k": 2.5},
        {"top_k": True},
        {"top_p": 1.5},
        {"top_p": -0.1},
        {"min_p": 2.0},
        {"repeat_penalty": 0.0},
        {"repeat_penalty": -1.0},
        {"repeat_last_n": -1},
        {"seed": -3},
        {"seed": 1.0},
    ],
)
def test_invalid_params_raise_value_error(options):
    name = next(iter(options))
    with pytest.raises(ValueError, match=name):
        SamplingParams(**options)


def test_params_are_frozen():
    with pytest.raises(AttributeError):
        SamplingParams().temperature = 1.0  # type: ignore[misc]


def test_logits_must_be_one_dimensional(logits):
    with pytest.raises(ValueError, match="1-D"):
        Sampler(SamplingParams())(logits[None, :], [])


# ---------------------------------------------------------------- greedy


def test_temperature_zero_is_argmax():
    rng = np.random.default_rng(1)
    sampler = Sampler(SamplingParams(temperature=0.0))
    for _ in range(20):
        values = rng.normal(size=N_VOCAB).astype(np.float32)
        assert sampler(values, []) == int(np.argmax(values))


# ---------------------------------------------------------------- support


def test_top_k_restricts_support(logits):
    drawn = set(draws(SamplingParams(temperature=100.0, top_k=5, top_p=1.0, min_p=0.0, seed=0), logits))
    assert drawn == set(range(5))  # a hot temperature makes all five likely


def test_top_p_keeps_smallest_prefix_reaching_p(logits):
    p = 0.9
    cumulative = np.cumsum(probabilities(logits))
    n_kept = int(np.searchsorted(cumulative, p)) + 1
    params = SamplingParams(temperature=100.0, top_k=0, top_p=p, min_p=0.0, seed=0)
    drawn = set(draws(params, logits, n=4 * N_DRAWS))
    assert drawn <= set(range(n_kept))
    assert n_kept - 1 in drawn  # the token that crosses p is kept


def test_top_p_reaches_beyond_its_first_look():
    nearly_flat = np.linspace(0.0, -1.0, N_VOCAB, dtype=np.float32)
    n_kept = int(np.searchsorted(np.cumsum(probabilities(nearly_flat)), 0.5)) + 1
    assert n_kept > 64  # top_p first looks at 64 tokens, then at 512
    params = SamplingParams(temperature=1.0, top_k=0, top_p=0.5, min_p=0.0, seed=0)
    drawn = set(draws(params, nearly_flat, n=4 * N_DRAWS))
    assert drawn <= set(range(n_kept))
    assert max(drawn) > 64


def test_top_p_zero_keeps_only_the_most_likely(logits):
    assert set(draws(SamplingParams(temperature=1.0, top_k=0, top_p=0.0, min_p=0.0, seed=0), logits)) == {0}


def test_min_p_keeps_tokens_near_the_best(logits):
    min_p = 0.2
    probs = probabilities(logits)
    allowed = set(np.flatnonzero(probs >= min_p * probs.max()).tolist())
    assert 1 < len(allowed) < 20
    drawn = set(draws(SamplingParams(temperature=100.0, top_k=0, top_p=1.0, min_p=min_p, seed=0), logits))
    assert drawn == allowed


def test_no_filters_reach_the_whole_vocabulary():
    flat = np.zeros(20, dtype=np.float32)
    drawn = set(draws(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0), flat))
    assert drawn == set(range(20))


# ---------------------------------------------------------------- repeat penalty


def test_repeat_penalty_divides_positive_and_multiplies_negative_logits():
    logits = np.array([4.0, -4.0, 2.0, -2.0, 1.0], dtype=np.float32)
    penalized = apply_repeat_penalty(logits, [0, 1, 0], penalty=2.0, last_n=64)
    np.testing.assert_array_equal(penalized, [2.0, -8.0, 2.0, -2.0, 1.0])
    np.testing.assert_array_equal(logits, [4.0, -4.0, 2.0, -2.0, 1.0])  # input untouched


def test_repeat_penalty_looks_only_at_last_n():
    logits = np.array([4.0, 4.0, 4.0], dtype=np.float32)
    penalized = apply_repeat_penalty(logits, [0, 1, 2], penalty=2.0, last_n=2)
    np.testing.assert_array_equal(penalized, [4.0, 2.0, 2.0])


def test_repeat_penalty_changes_the_greedy_choice():
    logits = np.array([3.0, 2.0, 0.0], dtype=np.float32)
    assert Sampler(SamplingParams())(logits, [0]) == 0
    assert Sampler(SamplingParams(repeat_penalty=2.0))(logits, [0]) == 1


# ---------------------------------------------------------------- seeds


def test_same_seed_same_draws(logits):
    params = SamplingParams(temperature=1.5, seed=1234)
    assert draws(params, logits, n=50) == draws(params, logits, n=50)


def test_different_seeds_differ(logits):
    first = draws(SamplingParams(temperature=1.5, seed=1), logits, n=50)
    second = draws(SamplingParams(temperature=1.5, seed=2), logits, n=50)
    assert first != second


# ---------------------------------------------------------------- bias, penalties, typical, constraints


def test_logit_bias_is_added_before_everything_else(logits):
    banned = Sampler(SamplingParams(logit_bias={0: -math.inf}))
    assert banned(logits, []) == 1
    raised = Sampler(SamplingParams(logit_bias=[(500, 100.0)]))
    assert raised(logits, []) == 500


@pytest.mark.parametrize(
    "bias, message",
    [({-1: 1.0}, "non-negative"), ({1: float("nan")}, "number"), ({1: math.inf}, "number"), ([(1,)], "pairs")],
)
def test_bad_logit_bias_is_named(bias, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(logit_bias=bias)


def test_logit_bias_outside_the_vocabulary_is_named():
    sampler = Sampler(SamplingParams(logit_bias={N_VOCAB: 1.0}))
    with pytest.raises(ValueError, match=f"token id {N_VOCAB}"):
        sampler.check_vocab(N_VOCAB)


def test_frequency_and_presence_penalties_follow_llama_cpp():
    logits = np.array([2.0, -1.0, 0.5], dtype=np.float32)
    # token 0 seen twice, token 1 once: repeat first, then c * frequency + presence
    out = apply_penalties(logits, [0, 1, 0], repeat=2.0, frequency=0.25, presence=0.5)
    assert out == pytest.approx([2.0 / 2 - 2 * 0.25 - 0.5, -1.0 * 2 - 0.25 - 0.5, 0.5])


def test_penalties_see_the_last_n_tokens_and_the_prompt_only_when_asked():
    logits = np.array([1.0, 0.9, 0.0], dtype=np.float32)
    history = [0, 2, 2]  # a prompt of one token (0), then two generated
    counted = Sampler(SamplingParams(presence_penalty=1.0), n_prompt=1)
    assert counted(logits, history) == 1  # the prompt's token 0 is penalized: 0.0 < 0.9
    skipped = Sampler(SamplingParams(presence_penalty=1.0, penalize_prompt=False), n_prompt=1)
    assert skipped(logits, history) == 0
    window = Sampler(SamplingParams(presence_penalty=1.0, repeat_last_n=2))
    assert window(logits, history) == 0  # token 0 left the window


def test_typical_keeps_the_tokens_nearest_the_entropy():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05], dtype=np.float32))
    ids, _ = typical((np.arange(4), logits), 0.5)
    # entropy 1.14 nats; surprises 0.69, 1.20, 1.90, 3.00: token 1 first (0.3), then 0 (0.8 > 0.5)
    assert list(ids) == [1, 0]
    assert typical((np.arange(4), logits), 1.0)[0].size == 4


class Only:
    """A constraint allowing a fixed set of tokens."""

    def __init__(self, allowed) -> None:
        self.allowed_ids = set(allowed)
        self.asked = 0

    def allowed(self, ids):
        self.asked += len(ids)
        return np.array([int(i) in self.allowed_ids for i in ids], dtype=bool)


def test_a_constraint_masks_before_top_k(logits):
    legal = Only([3, 700, 900])
    assert Sampler(SamplingParams())(logits, [], legal) == 3
    ids, probs = Sampler(SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0)).distribution(logits, [], legal)
    assert sorted(ids) == [3, 700] and probs.sum() == pytest.approx(1.0)
    # all legal tokens without top-k: the distribution is the masked softmax
    ids, probs = Sampler(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)).distribution(logits, [], legal)
    expected = probabilities(logits)[[3, 700, 900]]
    assert dict(zip(ids.tolist(), probs)) == pytest.approx(dict(zip([3, 700, 900], expected / expected.sum())))


def test_a_greedy_constraint_is_asked_about_the_best_tokens_only(logits):
    legal = Only([2])
    assert Sampler(SamplingParams())(logits, [], legal) == 2
    assert legal.asked < 100


def test_a_constraint_that_allows_nothing_raises():
    with pytest.raises(NoLegalToken):
        Sampler(SamplingParams())(np.zeros(10, dtype=np.float32), [], Only([]))
