"""river_bench.projection: the bandwidth-bound projection of a lossless run."""

from __future__ import annotations

import pytest

from river_bench.projection import project


def test_project_charges_river_forwards_at_their_bytes():
    run = {
        "weight_bytes": {"backbone": 1000, "iq4_nl head q4_0": 250},
        "rows": [
            {"name": "backbone (ours)", "ratio": 1.0},
            # 2 tokens per verify, one river forward per round at a quarter of the bytes: 2 / 1.25
            {
                "name": "lossless river (iq4_nl head q4_0)",
                "ratio": 1.1,
                "rounds": 10,
                "generated": 20,
                "draft_forwards": 10,
            },
            # n-gram drafts cost nothing: the tokens per verify
            {"name": "lossless ngram", "ratio": 1.3, "rounds": 10, "generated": 15, "draft_forwards": 0},
            {"name": "draft small.gguf", "ratio": 1.2, "rounds": 10, "generated": 20, "draft_forwards": 10},
            {"name": "lossless idle", "ratio": 1.0, "rounds": 0, "generated": 0, "draft_forwards": 0},
        ],
    }
    assert project(run) == [
        ("lossless river (iq4_nl head q4_0)", 1.1, pytest.approx(1.6)),
        ("lossless ngram", 1.3, pytest.approx(1.5)),
    ]
