"""The corpus: its sources, the calibration/held-out split, token chunks."""

from __future__ import annotations

from typing import Optional

import pytest

from river_cpp.measure.corpus import (
    Document,
    chat_prompts,
    default_corpus,
    document_tokens,
    load_corpus,
    prompt_documents,
    split_corpus,
    stdlib_sources,
    text_files,
    token_chunks,
)

BOS = 1


class CharTokenizer:
    """One token per character (its code point + 10), BOS = 1, a trivial chat template."""

    def __init__(self, template: Optional[str] = "<user>") -> None:
        self.chat_template = template

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = False) -> list[int]:
        return ([BOS] if add_bos else []) + [ord(c) + 10 for c in text]

    def apply_chat_template(self, messages, *, add_assistant: bool = True) -> str:
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + ("<assistant>" if add_assistant else "")


def test_chat_prompts_are_many_and_distinct():
    prompts = chat_prompts()
    assert len(prompts) >= 50
    assert len({p.text for p in prompts}) == len(prompts)
    assert all(p.chat and p.source == "chat" and p.text == p.text.strip() and "---" not in p.text for p in prompts)
    assert sum(len(p.text.split()) for p in prompts) > 1500  # a few thousand tokens


def test_prompt_documents_split_on_separator_lines_and_drop_empty_blocks():
    text = "first\n  line two \n---\n\n---\nsecond ---\n  ---  \n"
    documents = prompt_documents(text, "mine")
    assert documents == [
        Document("mine/000", "first\n  line two", "mine", chat=True),
        Document("mine/002", "second ---", "mine", chat=True),
    ]


def test_stdlib_sources_read_real_modules():
    documents = stdlib_sources(["textwrap", "no_such_module_xyz"])
    assert [d.name for d in documents] == ["stdlib/textwrap"]
    assert "def dedent" in documents[0].text


def test_default_corpus_has_every_source():
    sources = {d.source for d in default_corpus()}
    assert {"chat", "stdlib"} <= sources
    assert len({d.name for d in default_corpus()}) == len(default_corpus())


def test_load_corpus_reads_files_instead_of_the_default(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello corpus", encoding="utf-8")
    assert load_corpus([path]) == [Document("notes.txt", "hello corpus", "files")]
    with pytest.raises(FileNotFoundError):
        text_files([tmp_path / "missing.txt"])


def test_split_is_deterministic_disjoint_and_stable():
    documents = [Document(f"doc/{i}", "x", "s") for i in range(200)]
    calibration, held_out = split_corpus(documents)
    assert split_corpus(documents) == (calibration, held_out)
    assert sorted(d.name for d in calibration + held_out) == sorted(d.name for d in documents)
    assert 60 < len(held_out) < 140
    # adding documents does not move the old ones
    more_calibration, more_held_out = split_corpus(documents + [Document(f"new/{i}", "y", "s") for i in range(50)])
    assert set(held_out) <= set(more_held_out) and set(calibration) <= set(more_calibration)
    assert split_corpus(documents, held_out=0.0) == (documents, [])
    with pytest.raises(ValueError):
        split_corpus(documents, held_out=1.5)


def test_document_tokens_render_chat_in_the_template():
    tokenizer = CharTokenizer()
    chat = Document("c", "hi", "chat", chat=True)
    assert document_tokens(tokenizer, chat) == tokenizer.tokenize("<user>hi<assistant>", add_bos=False)
    assert document_tokens(CharTokenizer(template=None), chat) == tokenizer.tokenize("hi", add_bos=False)
    assert document_tokens(tokenizer, Document("t", "hi", "text")) == tokenizer.tokenize("hi", add_bos=False)


def test_token_chunks_cut_streams_and_interleave_sources():
    tokenizer = CharTokenizer()
    documents = [Document("a1", "abcdef", "a"), Document("a2", "ghij", "a"), Document("b1", "0123456789", "b")]
    chunks = token_chunks(tokenizer, documents, length=4)  # BOS + 3 characters
    text = ["".join(chr(t - 10) for t in chunk[1:]) for chunk in chunks]
    assert all(chunk[0] == BOS and len(chunk) == 4 for chunk in chunks)
    # source a's stream "abcdefghij" and b's "0123456789", interleaved; short tails dropped
    assert text == ["abc", "012", "def", "345", "ghi", "678"]


def test_token_chunks_budget_is_shared_and_spread():
    tokenizer = CharTokenizer()
    documents = [Document("a", "a" * 3 + "b" * 3 + "c" * 3 + "d" * 3, "a"), Document("b", "xyz", "b")]
    chunks = token_chunks(tokenizer, documents, length=4, n_chunks=3)
    text = ["".join(chr(t - 10) for t in chunk[1:]) for chunk in chunks]
    # b has one window; a gets the rest, its first and last
    assert text == ["aaa", "xyz", "ddd"]
    assert token_chunks(tokenizer, documents, length=4, n_chunks=0) == []
    assert len(token_chunks(tokenizer, documents, length=4, n_chunks=100)) == 5
    with pytest.raises(ValueError):
        token_chunks(tokenizer, documents, length=1)
