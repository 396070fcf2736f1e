"""Quality measures: KL divergence, same-top-1, tokens until divergence."""

from __future__ import annotations

import numpy as np
import pytest

from river_cpp import ExitPolicy, ExitStats, RiverModel
from river_cpp.evaluate import QualityReport, backbone_reference, kl_divergence, teacher_forced, tokens_until_divergence


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


def test_tokens_until_divergence():
    assert tokens_until_divergence([1, 2, 3], [1, 2, 4]) == 2
    assert tokens_until_divergence([1, 2], [1, 2]) == 2
    assert tokens_until_divergence([5], [6]) == 0


def test_teacher_forced_backbone_against_itself(tiny_llama4, river_cache):
    with RiverModel(tiny_llama4, policy=ExitPolicy.at_layer(2), n_ctx=64) as model:
        prompt = model.tokenize("Hello there")
        continuation, reference = backbone_reference(model, prompt, 8)
        assert model.policy == ExitPolicy.at_layer(2)  # restored
        assert list(reference.exit_layers) == [4] * 8
        river = teacher_forced(model, prompt, continuation)
        assert list(river.exit_layers) == [2] * 8
        assert QualityReport.compare(reference.logits, reference.logits).mean_kl == 0
        assert QualityReport.compare(reference.logits, river.logits).mean_kl > 0


def test_exit_stats():
    stats = ExitStats.from_exit_layers([0, 2, 2, 4], n_layer=4)
    assert stats.mean_exit_layer == 2.0
    assert stats.histogram == (1, 0, 2, 0, 1)
    assert stats.backbone_fraction_avoided == 0.5
    assert "50.0%" in stats.summary()
