"""river_bench.repeated_work: the sets load, every configuration runs each request
in turn, and the lossless rows are checked token for token against plain decoding."""

from __future__ import annotations

import pytest

from river_cpp import RiverModel

from river_bench.repeated_work import (
    SETS,
    chat_requests,
    edit_requests,
    extraction_requests,
    measure_repeated_work,
    project_folder,
    results_json,
    results_table,
)


def test_the_sets_hold_what_the_benchmark_promises():
    assert len(extraction_requests(8)) == 12
    edits = edit_requests(8)
    assert len(edits) == 8 and all("```python" in r.messages[0]["content"] for r in edits)
    assert (project_folder() / "shelf" / "storage.py").is_file()
    next_request = chat_requests(8)
    assert len(next_request([]).messages) == 2  # the system message and the first turn
    assert len(next_request(["an answer"] * 5).messages) == 2 + 2 * 5
    assert next_request(["an answer"] * 6) is None


def test_every_configuration_runs_and_the_lossless_ones_are_identical(tiny_llama4, river_cache):
    with RiverModel(tiny_llama4, n_ctx=2048, n_threads=2, river=None, progress=False) as model:
        results = measure_repeated_work(model, sets=SETS, max_tokens={name: 6 for name in SETS})
    assert [r.name for r in results] == list(SETS)
    counts = {"extraction": 12, "edits": 8, "chat": 6}
    for result in results:
        assert set(result.runs) == {"plain", "context", "memory"}
        assert all(len(runs) == counts[result.name] for runs in result.runs.values())
        assert result.identical("context") == result.identical("memory") == (counts[result.name],) * 2
    edits = next(r for r in results if r.name == "edits")
    assert all("corpus" in run.index for run in edits.runs["memory"])
    assert "| extraction | memory |" in results_table(results)
    assert results_json(results)[0]["configs"]["plain"]["runs"][0]["identical"] is None


def test_unknown_sets_are_refused(tiny_llama4, river_cache):
    with RiverModel(tiny_llama4, n_ctx=256, n_threads=1, river=None, progress=False) as model:
        with pytest.raises(ValueError, match="unknown sets"):
            measure_repeated_work(model, sets=["poems"])


def test_top2_gap_is_taken_where_the_tokens_first_differ(tiny_llama4, river_cache):
    from river_bench.repeated_work import top2_gap

    with RiverModel(tiny_llama4, n_ctx=256, n_threads=1, river=None, progress=False) as model:
        reference = model.generate("Hello", max_tokens=4, temperature=0.0, speculative=False).token_ids
        other = reference[:2] + [(reference[2] + 1) % model.n_vocab]
        gap = top2_gap(model, "Hello", reference, other)
        model.reset()
        logits = model.forward(model.tokenize("Hello", add_bos=True, special=True) + reference[:2], last_only=True)[0]
        top2 = sorted(logits)[-2:]
        assert gap == pytest.approx((top2[1] - top2[0]) / abs(logits).max(), rel=1e-5)
