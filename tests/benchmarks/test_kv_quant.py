"""river_bench.kv_quant: each document read in chunks by both caches of a side, the KL
and top-1 figures what their logits say, the bytes ratio the caches'."""

from __future__ import annotations

import numpy as np
import pytest

from river_cpp.measure.evaluate import kl_divergence

from river_bench import kv_quant


class FakeSide:
    """Logits by position: F16 rows from a seed, q8_0 rows the same plus `shift` on token 0."""

    def __init__(self, shift: float) -> None:
        self.shift, self.read = shift, {"f16": 0, "q8_0": 0}
        self.chunks: list[int] = []

    def rows(self, start: int, n: int) -> np.ndarray:
        return np.stack([np.random.default_rng(p).normal(size=8) for p in range(start, start + n)])

    def reset(self) -> None:
        self.read = {"f16": 0, "q8_0": 0}

    def logits(self, kind, chunk):
        rows = self.rows(self.read[kind], len(chunk))
        self.read[kind] += len(chunk)
        if kind == "q8_0":
            rows[:, 0] += self.shift
            self.chunks.append(len(chunk))
        return rows

    def kv_bytes(self):
        return {"f16": 64, "q8_0": 34}


def test_the_divergence_is_what_the_logits_say():
    side = FakeSide(shift=0.5)
    inputs = [("a", list(range(300))), ("b", list(range(40)))]
    result = kv_quant.measure(side, inputs, progress=lambda line: None)
    assert side.chunks == [kv_quant.CHUNK, kv_quant.CHUNK, 300 - 2 * kv_quant.CHUNK, 40]
    assert result.positions == [300, 40]
    want = [kl_divergence(side.rows(0, n), side.rows(0, n) + np.eye(8)[0] * 0.5).sum() for n in (300, 40)]
    assert result.kl == pytest.approx(want)
    assert result.mean_kl == pytest.approx(sum(want) / 340)
    assert result.bytes_ratio == pytest.approx(34 / 64)
    assert "0.5312x" in kv_quant.report({"ours": result}, n_ctx=512)


def test_the_same_logits_diverge_nowhere():
    result = kv_quant.measure(FakeSide(shift=0.0), [("a", list(range(50)))], progress=lambda line: None)
    assert result.mean_kl == pytest.approx(0.0, abs=1e-12) and result.top1_agreement == 1.0


def test_every_document_is_read_and_can_be_cut():
    whole = kv_quant.documents(lambda messages: list(range(len(messages[0]["content"]))), 0)
    assert [name for name, _ in whole] == ["fnmatch", "sched", "apache"]
    assert all(len(ids) > 4000 for _, ids in whole)
    cut = kv_quant.documents(lambda messages: list(range(len(messages[0]["content"]))), 100)
    assert all(len(ids) == 100 for _, ids in cut)
