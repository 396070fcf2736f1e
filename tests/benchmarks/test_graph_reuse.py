"""river_bench.graph_reuse: the decode configurations, timed, and their summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from river_cpp import RiverModel

from river_bench.graph_reuse import POLICIES, run, summarize, table_lines


def _decode(tps: float) -> dict:
    return {
        "tokens_per_second": tps,
        "build_ms_per_token": 0.1,
        "compute_ms_per_token": 1.0,
        "builds_per_token": 0.0,
        "graphs_per_token": 1.0,
    }


def test_summary_pairs_the_check_with_the_same_rounds_backbone():
    runs = {
        f"{name}, {reuse}": [_decode(tps) for tps in speeds]
        for reuse in ("reused", "built")
        for name, speeds in {"backbone": (100.0, 50.0, 80.0), "checked": (90.0, 50.0, 76.0), "river": (1, 1, 1)}.items()
    }
    summary = summarize(runs)
    assert summary["backbone, reused"]["tokens_per_second"] == 80.0
    # per round 0.9, 1.0, 0.95: the median overhead is 5%, not 1 - 76/80
    assert summary["check overhead, built"] == pytest.approx(0.05)
    lines = table_lines(summary, 3)
    assert lines[-1] == "never-exit check overhead, graphs built: 5.0% (median of 3 rounds)"


def test_run_decodes_every_configuration(tiny_llama: Path, tmp_path, monkeypatch):
    monkeypatch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path))
    options = {"n_threads": 1, "n_ctx": 128, "progress": False}
    with (
        RiverModel(tiny_llama, **options) as reusing,
        RiverModel(tiny_llama, **options, reuse_graphs=False) as building,
    ):
        runs = run(reusing, building, 2, 1)
    assert sorted(runs) == sorted(f"{p}, {r}" for p in POLICIES for r in ("reused", "built"))
    assert all(len(rs) == 1 and rs[0]["tokens_per_second"] > 0 for rs in runs.values())
    assert runs["backbone, reused"][0]["graphs_per_token"] >= 1.0
