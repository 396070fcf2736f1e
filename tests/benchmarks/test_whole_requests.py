"""river_bench.whole_requests: the long-input set is whole (every task names a
document that is there, with its licence noted), and the summary's ratios and identity
count are what its timings say."""

from __future__ import annotations

import pytest

from river_bench.whole_requests import DATA, FOLLOW_UPS, Timing, load_set, summary, table_lines, task_messages


def test_the_long_input_set_is_complete():
    documents, tasks = load_set()
    _, long_tasks = load_set(key="long_tasks")
    assert {t.document for t in tasks + long_tasks} == set(documents)
    assert {t.kind for t in tasks} == {"question", "quote", "edit", "fresh"}
    assert set(FOLLOW_UPS) <= set(documents)
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    for name, text in documents.items():
        assert len(text) > 4000, name  # long inputs: over a thousand tokens in any vocabulary
    for file in ("fnmatch.py.txt", "sched.py.txt", "Apache-2.0.txt", "textwrap.py.txt", "random.py.txt"):
        assert file in readme and (DATA / file).is_file()
    assert "licence" in readme.lower()
    # the long workload's documents: about 4k and 8k tokens (over 3 characters a token)
    assert all(len(documents[t.document]) > 3 * 4000 for t in long_tasks)
    assert max(len(documents[t.document]) for t in long_tasks) > 3 * 8000
    messages = task_messages(documents, tasks[0])
    assert messages[0]["content"].startswith(documents[tasks[0].document])  # the document first


def test_an_unknown_document_is_refused(tmp_path):
    (tmp_path / "tasks.json").write_text(
        '{"documents": {}, "tasks": [{"name": "x", "document": "nope", "kind": "question",'
        ' "request": "?", "max_tokens": 4}]}'
    )
    with pytest.raises(ValueError, match="unknown document 'nope'"):
        load_set(tmp_path)


def test_summary_ratios_and_identity():
    results = {
        "llama": [Timing("a", 1.0, 4.0, 100, 10), Timing("b", 1.0, 2.0, 100, 10)],
        "plain": [Timing("a", 1.0, 2.0, 100, 11, [1, 2]), Timing("b", 1.0, 2.0, 100, 11, [3])],
        "default": [Timing("a", 1.0, 1.0, 100, 11, [1, 2]), Timing("b", 1.0, 4.0, 100, 11, [4])],
    }
    rows = {r["config"]: r for r in summary(results)}
    assert rows["plain"]["vs_llama"] == pytest.approx(6.0 / 4.0)
    assert rows["default"]["vs_plain"] == pytest.approx(4.0 / 5.0)
    assert rows["default"]["worst_vs_plain"] == pytest.approx(0.5)
    assert rows["default"]["identical_to_plain"] == 1
    assert rows["plain"]["decode_tokens_per_s"] == pytest.approx(20 / 2.0)
    assert "vs_llama" not in rows["llama"]
    lines = table_lines(list(rows.values()))
    assert lines[0].count("|") == lines[2].count("|") and "0.80x" in "\n".join(lines)
