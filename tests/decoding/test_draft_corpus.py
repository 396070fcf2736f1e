"""river_cpp.decoding.draft_corpus: which files a corpus reads, and its index cached
on disk by content and loaded memory-mapped."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from river_cpp.decoding import draft_corpus
from river_cpp.decoding.draft_corpus import corpus_files, load_corpus
from river_cpp.decoding.suffix_index import SuffixIndex


class ByteTokenizer:
    """A tokenizer whose tokens are UTF-8 bytes (what load_corpus uses of one)."""

    n_vocab = 256

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = False) -> list[int]:
        return list(text.encode("utf-8"))

    def detokenize_bytes(self, ids) -> bytes:
        return bytes(ids)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(draft_corpus, "_loaded", type(draft_corpus._loaded)())
    return tmp_path / "cache" / "draft-corpus"


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "project"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "util.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "README.md").write_text("A project.\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core] secret\n")
    (root / ".env").write_text("TOKEN=secret\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "util.pyc").write_bytes(b"\x00\x01")
    (root / "logo.png").write_bytes(b"\x89PNG\x00\x00")
    (tmp_path / "outside.txt").write_text("not named\n")
    os.symlink(tmp_path / "outside.txt", root / "link.txt")
    return root


def test_a_folder_reads_its_text_files_only(project):
    assert corpus_files([project]) == [project / "README.md", project / "pkg" / "util.py"]


def test_bad_corpus_paths(project, tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        corpus_files([tmp_path / "missing"])
    with pytest.raises(ValueError, match="not UTF-8 text"):
        corpus_files([project / "logo.png"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no text files"):
        corpus_files([tmp_path / "empty"])


def test_the_index_is_cached_on_disk_by_content_and_memory_mapped(project, cache, tmp_path, monkeypatch):
    corpus = load_corpus(ByteTokenizer(), [project])
    assert corpus.files == 2 and corpus.tokens == len("A project.\n") + len("def add(a, b):\n    return a + b\n")
    assert list(cache.iterdir()) == [cache / corpus.key]
    tokens, m = corpus.index.propose(list(b"def add("), 4, 2)[:2]
    assert bytes(tokens) == b"a, b" and m == len(b"def add(")

    # A copy of the files elsewhere, in a new process (nothing loaded): read from disk, mapped.
    copy = tmp_path / "copy"
    os.rename(project, copy)
    monkeypatch.setattr(draft_corpus, "_loaded", type(draft_corpus._loaded)())

    def no_build(documents):
        raise AssertionError("built again")

    with monkeypatch.context() as patch:
        patch.setattr(SuffixIndex, "build", no_build)
        again = load_corpus(ByteTokenizer(), [copy])
    assert again.key == corpus.key
    assert isinstance(again.index.tokens, np.memmap) and isinstance(again.index.order, np.memmap)
    assert again.index.propose(list(b"def add("), 4, 2)[:2] == (tokens, m)

    # Changed content: another key, built anew.
    (copy / "README.md").write_text("Another project.\n")
    changed = load_corpus(ByteTokenizer(), [copy])
    assert changed.key != corpus.key
    assert sorted(p.name for p in cache.iterdir()) == sorted([corpus.key, changed.key])


def test_a_broken_cache_entry_is_rebuilt(project, cache):
    corpus = load_corpus(ByteTokenizer(), [project])
    (cache / corpus.key / "order.npy").write_bytes(b"garbage")
    draft_corpus._loaded.clear()
    again = load_corpus(ByteTokenizer(), [project])
    assert again.key == corpus.key and again.index.propose(list(b"def add("), 4, 2)[0] == list(b"a, b")
