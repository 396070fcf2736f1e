"""Quality measures: KL divergence, same-top-1, tokens until divergence."""

from __future__ import annotations

import numpy as np
import pytest
from routes import PAPER_RIVER

from river_cpp import ExitPolicy, ExitStats, RiverModel
from river_cpp.measure.evaluate import (
    KL_PERCENTILES,
    Positions,
    QualityReport,
    backbone_reference,
    greedy_tokens,
    kl_divergence,
    teacher_forced,
    tokens_until_divergence,
)


def test_kl_divergence_matches_definition():
    p_logits = np.array([[1.0, 2.0, 3.0]])
    q_logits = np.array([[3.0, 2.0, 1.0]])
    p = np.exp(p_logits) / np.exp(p_logits).sum()
    q = np.exp(q_logits) / np.exp(q_logits).sum()
    assert kl_divergence(p_logits, q_logits)[0] == pytest.approx(float((p * np.log(p / q)).sum()))
    assert kl_divergence(p_logits, p_logits + 5.0)[0] == pytest.approx(0.0, abs=1e-12)


def test_quality_report_counts_top1():
    reference = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 2.0]])
    other = np.array([[0.0, 1.0], [0.0, 1.0], [0.0, 3.0]])
    report = QualityReport.compare(reference, other)
    assert report.same_top1 == pytest.approx(2 / 3)
    assert report.n_positions == 3 and report.max_kl > 0


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_kld_of_identical_logits_is_zero():
    logits = np.random.default_rng(0).normal(0, 5, (16, 1000)).astype(np.float32)
    report = QualityReport.compare(logits, logits.copy())
    assert report.mean_kl == 0 and report.max_kl == 0 and report.mean_kl_se == 0
    assert all(v == 0 for v in report.kl_percentiles.values())
    assert report.same_top1 == 1 and report.mean_abs_dp == 0


def test_kld_and_delta_p_match_a_direct_numpy_computation():
    rng = np.random.default_rng(1)
    reference = rng.normal(0, 3, (200, 50)).astype(np.float32)
    other = reference + rng.normal(0, 1, reference.shape).astype(np.float32)
    p, q = _softmax(reference.astype(np.float64)), _softmax(other.astype(np.float64))
    kl = (p * np.log(p / q)).sum(-1)
    top = p.argmax(-1)
    abs_dp = np.abs(p[np.arange(200), top] - q[np.arange(200), top])
    positions = Positions.compare(reference, other)
    np.testing.assert_allclose(positions.kl, kl, rtol=1e-10)
    np.testing.assert_allclose(positions.abs_dp, abs_dp, rtol=1e-10)
    np.testing.assert_array_equal(positions.same_top1, top == q.argmax(-1))

    report = QualityReport.from_positions(positions)
    assert report.mean_kl == pytest.approx(kl.mean())
    assert report.mean_kl_se == pytest.approx(kl.std(ddof=1) / np.sqrt(kl.size))
    assert report.max_kl == pytest.approx(kl.max())
    for q_ in KL_PERCENTILES:
        assert report.kl_percentiles[q_] == pytest.approx(np.percentile(kl, q_))
    assert report.median_kl == pytest.approx(np.median(kl))
    same = (top == q.argmax(-1)).mean()
    assert report.same_top1 == pytest.approx(same)
    assert report.same_top1_se == pytest.approx(np.sqrt(same * (1 - same) / (kl.size - 1)))
    assert report.mean_abs_dp == pytest.approx(abs_dp.mean())


def test_positions_concatenate_in_order_and_reject_mismatched_shapes():
    a = Positions.compare(np.array([[0.0, 1.0]]), np.array([[1.0, 0.0]]))
    b = Positions.compare(np.array([[0.0, 1.0]]), np.array([[0.0, 1.0]]))
    both = Positions.concatenate([a, b])
    assert list(both.same_top1) == [False, True] and both.kl[1] == 0 < both.kl[0]
    assert Positions.concatenate([]).kl.size == 0
    with pytest.raises(ValueError, match="no positions"):
        QualityReport.from_positions(Positions.concatenate([]))
    with pytest.raises(ValueError, match="shapes differ"):
        Positions.compare(np.zeros((2, 3)), np.zeros((2, 4)))


def test_quality_block_and_json():
    rng = np.random.default_rng(2)
    reference = rng.normal(0, 3, (50, 20))
    report = QualityReport.compare(reference, reference + rng.normal(0, 1, reference.shape))
    lines = report.block("river tau=0.98").splitlines()
    assert lines[0] == "====== KL divergence statistics: river tau=0.98 (50 positions) ======"
    assert lines[1] == f"Mean    KLD: {report.mean_kl:10.6f} ± {report.mean_kl_se:9.6f}"
    assert [line.split(":")[0] for line in lines[2:8]] == [
        "Maximum KLD",
        "  99.9% KLD",
        "  99.0% KLD",
        "  95.0% KLD",
        "  90.0% KLD",
        "Median  KLD",
    ]
    assert float(lines[7].split(":")[1]) == pytest.approx(report.median_kl, abs=1e-6)
    assert lines[-1].startswith("Same top-1 :") and "%" in lines[-1]
    record = report.to_json()
    assert record["kl_percentiles"]["99.9"] == report.kl_percentiles[99.9]
    assert record["mean_abs_dp"] == report.mean_abs_dp


def test_tokens_until_divergence():
    assert tokens_until_divergence([1, 2, 3], [1, 2, 4]) == 2
    assert tokens_until_divergence([1, 2], [1, 2]) == 2
    assert tokens_until_divergence([5], [6]) == 0


def test_teacher_forced_backbone_against_itself(tiny_llama4, river_cache):
    with RiverModel(tiny_llama4, **PAPER_RIVER, policy=ExitPolicy.at_layer(2), n_ctx=64) as model:
        prompt = model.tokenize("Hello there")
        continuation, reference = backbone_reference(model, prompt, 8)
        assert model.policy == ExitPolicy.at_layer(2)  # restored
        assert list(reference.exit_layers) == [4] * 8
        river = teacher_forced(model, prompt, continuation)
        assert list(river.exit_layers) == [2] * 8
        assert QualityReport.compare(reference.logits, reference.logits).mean_kl == 0
        assert QualityReport.compare(reference.logits, river.logits).mean_kl > 0


@pytest.mark.slow
def test_greedy_tokens_take_each_steps_policy(tiny_llama4, river_cache):
    with RiverModel(tiny_llama4, **PAPER_RIVER, policy=ExitPolicy.never(), n_ctx=64) as model:
        prompt = model.tokenize("Hello there")
        seen, exits = [], []

        def step(i: int) -> None:
            if seen:
                exits.append(int(model.last_exit_layers[-1]))
            seen.append(i)

        def depth(i: int) -> ExitPolicy:
            return ExitPolicy.at_layer(i % 3)

        tokens = greedy_tokens(model, prompt, 5, before_step=step, policy=depth)
        exits.append(int(model.last_exit_layers[-1]))
        assert seen == [0, 1, 2, 3, 4] and exits == [0, 1, 2, 0, 1]
        # the same per-step depths in a teacher-forced run give the same choices
        forced = teacher_forced(model, prompt, tokens, policy=depth)
        assert list(forced.logits.argmax(-1)) == tokens
        assert list(forced.exit_layers) == [0, 1, 2, 0, 1]
        assert model.policy == ExitPolicy.never()  # the model's own default is untouched


def test_exit_stats():
    stats = ExitStats.from_exit_layers([0, 2, 2, 4], n_layer=4)
    assert stats.mean_exit_layer == 2.0
    assert stats.histogram == (1, 0, 2, 0, 1)
    assert stats.backbone_fraction_avoided == 0.5
    assert "50.0%" in stats.summary()
