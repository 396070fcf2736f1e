"""The acceptance rule on hand-made distributions, without a model (as vLLM tests its
rejection sampler): the emitted tokens are the target's samples whatever the drafts,
a deterministic draft is kept with probability p(x), and the replacement after a
rejection is distributed as p without x."""

import numpy as np
import pytest

from river_cpp.decoding.acceptance import sample, verify_drafts
from river_cpp.engine.compute.backbone import common_prefix


def dist(probs: dict) -> tuple[np.ndarray, np.ndarray]:
    ids = np.array(list(probs), dtype=np.int64)
    p = np.array(list(probs.values()), dtype=np.float64)
    return ids, p / p.sum()


def test_sample_is_the_inverse_cdf_in_token_order():
    d = dist({7: 0.5, 3: 0.25, 9: 0.25})  # token order 3, 7, 9: cuts at 0.25 and 0.75
    assert [sample(d, u) for u in (0.0, 0.24, 0.25, 0.74, 0.75, 0.999999)] == [3, 3, 7, 7, 9, 9]
    assert sample(dist({5: 1.0}), 0.7) == 5


def test_sample_follows_the_distribution():
    d = dist({1: 0.1, 2: 0.6, 3: 0.3})
    rng = np.random.default_rng(0)
    counts = np.bincount([sample(d, u) for u in rng.random(20000)], minlength=4)[1:]
    assert np.allclose(counts / 20000, [0.1, 0.6, 0.3], atol=0.015)


TARGETS = [dist({1: 0.2, 2: 0.5, 3: 0.3}), dist({1: 0.6, 4: 0.4}), dist({2: 0.1, 3: 0.9}), dist({1: 1.0})]


def _sequential(uniforms):
    """What a plain loop emits from TARGETS with these draws."""
    return [sample(t, u) for t, u in zip(TARGETS, uniforms)]


@pytest.mark.parametrize("drafts", [[], [2], [3], [2, 1], [2, 4, 3], [3, 4, 2], [1, 1, 1]])
def test_verified_tokens_are_the_targets_samples_whatever_the_drafts(drafts):
    rng = np.random.default_rng(1)
    for _ in range(500):
        uniforms = list(rng.random(len(TARGETS)))
        n, after = verify_drafts(drafts, lambda j: TARGETS[j], uniforms)
        emitted = drafts[:n] + [after]
        assert emitted == _sequential(uniforms)[: n + 1]
        assert n == len(drafts) or after != drafts[n]


def test_a_deterministic_draft_is_kept_with_its_target_probability_and_replaced_by_the_rest():
    rng = np.random.default_rng(2)
    target = TARGETS[0]  # p(2) = 0.5
    kept, replacements = 0, {1: 0, 3: 0}
    trials = 20000
    for u in rng.random((trials, 2)):
        n, after = verify_drafts([2], lambda j: target, list(u))
        if n == 1:
            kept += 1
        else:
            replacements[after] += 1
    assert kept / trials == pytest.approx(0.5, abs=0.015)
    # p without the draft, normalized: 0.2 / 0.5 and 0.3 / 0.5
    assert replacements[1] / (trials - kept) == pytest.approx(0.4, abs=0.02)
    assert replacements[3] / (trials - kept) == pytest.approx(0.6, abs=0.02)


def test_greedy_targets_keep_exactly_their_argmax():
    greedy = (np.array([5]), np.ones(1))
    assert verify_drafts([5, 5], lambda j: greedy, [0.3, 0.9, 0.1]) == (2, 5)
    assert verify_drafts([6, 5], lambda j: greedy, [0.3, 0.9, 0.1]) == (0, 5)


def test_an_offer_keeps_its_tokens_up_to_the_first_that_differs_from_the_emitted_ones():
    assert common_prefix([3, 1, 4, 1], [3, 1, 5]) == 2
    assert common_prefix([3, 1], [3, 1, 4]) == 2  # the emitted tokens reach past the offer
    assert common_prefix([2], [3]) == 0
    assert common_prefix([], [1]) == 0
