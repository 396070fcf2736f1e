"""river_bench.lossless: the configurations of the lossless benchmark, their
interleaved decode against our backbone, and the rows it reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from river_bench import lossless


@pytest.fixture
def configs(tiny_llama: Path, tmp_path, monkeypatch):
    monkeypatch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path))
    configs, rivers = lossless.configurations(
        tiny_llama,
        rivers=["q4_0"],
        heads=["q8_0", "q4_0"],
        drafts=["river+ngram", "ngram"],
        draft_vocabs=[0],
        p_mins=[0.0, 0.5],
        fixed=[2],
        draft_model=None,
        peers=[],
        prompt_lookup=False,
        n_ctx=128,
        threads=1,
    )
    yield configs, rivers
    for model in {id(c.model): c.model for c in configs}.values():
        model.close()


def test_configurations_are_named_by_river_draft_and_p_min(configs):
    configs, rivers = configs
    assert sorted(rivers) == ["q4_0", "q4_0 head q4_0"]
    names = [c.name for c in configs]
    assert names[0] == "backbone (ours)" and configs[0].speculative is None
    assert "lossless river+ngram (q4_0) p_min 0.5" in names
    assert "lossless river+ngram (q4_0 head q4_0) p_min 0 k=2" in names
    assert "lossless ngram p_min 0.5" in names
    fixed = next(c for c in configs if c.name == "lossless river+ngram (q4_0) p_min 0.5 k=2")
    assert (fixed.speculative.max_draft, fixed.speculative.adaptive, fixed.speculative.p_min) == (2, False, 0.5)
    assert len(names) == 1 + 2 * 2 * 2 * 2  # backbone; per river: 2 drafts x 2 p_min, each also at k=2


def test_greedy_lossless_rows_are_the_backbones_tokens(configs):
    configs, _ = configs
    chosen = [configs[0], *(c for c in configs if c.name.endswith("(q4_0) p_min 0.5") or "ngram p_min 0" in c.name)]
    lossless.decode(chosen, ["The quick brown fox", "Once upon a time"], 6, 0.0, 1, progress=lambda line: None)
    rows = lossless.rows(chosen, 0.0)
    assert rows[0]["ratio"] == 1.0 and "sources" not in rows[0]
    for row in rows[1:]:
        assert row["identical"] == "2/2", row["name"]
        assert 1.0 <= row["tokens_per_verify"] <= 1 + 8
        assert sum(s["rounds"] for s in row["sources"].values()) == row["rounds"]
    lines = lossless.table_lines(rows)
    assert all(any(line.startswith(row["name"]) for line in lines) for row in rows)
