"""river_bench.costs: verify and draft timings leave the cache as they found
it, and the ceiling is the best full-acceptance speed over the timed verify sizes."""

from __future__ import annotations

from pathlib import Path

import pytest

from river_cpp import RiverModel

from river_bench.costs import ceiling, draft_cost, median_seconds, verify_costs, verify_curves


def test_ceiling_takes_the_best_timed_size():
    # k = 1: 2 / (0.5 + 1.5) = 1.0; k = 2: 3 / (1 + 1.75) = 1.09; k = 4: 5 / (2 + 2) = 1.25
    assert ceiling(0.5, {2: 1.5, 3: 1.75, 5: 2.0}) == (1.25, 4)
    assert ceiling(0.0, {2: 1.0}) == (2.0, 1)  # free drafts, a free verify: both tokens per step


def test_median_seconds_runs_the_function_each_time():
    calls = []
    assert median_seconds(lambda: calls.append(1), 5) >= 0.0
    assert len(calls) == 5


@pytest.fixture(scope="module")
def model(tiny_llama: Path, tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        with RiverModel(tiny_llama, river="q4_0", n_ctx=128, n_threads=1, progress=False) as model:
            yield model


def test_verify_and_draft_costs_rewind_to_the_context(model):
    context = model.tokenize("The quick brown fox jumps over the lazy dog", add_bos=True)
    costs = verify_costs(model, context, 4, 2)
    assert sorted(costs) == [1, 2, 3, 4] and all(t > 0 for t in costs.values())
    assert model.n_past == len(context)
    assert draft_cost(model, context, None, 2) > 0 and model.n_past == len(context)
    assert draft_cost(model, context, 16, 2) > 0  # a head over the first 16 ids


def test_verify_curves_time_every_engine_and_size(model, tiny_llama):
    with RiverModel(tiny_llama, river=None, n_ctx=128, n_threads=1, progress=False) as other:
        context = model.tokenize("The quick brown fox jumps", add_bos=True)
        curves = verify_curves({"a": model, "b": other}, context, 3, 2)
    assert {name: sorted(c) for name, c in curves.items()} == {"a": [1, 2, 3], "b": [1, 2, 3]}
    assert all(t > 0 for c in curves.values() for t in c.values())
