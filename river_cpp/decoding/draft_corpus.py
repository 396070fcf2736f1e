"""A corpus as a draft source: files the caller names (a project's code, a folder of
text), tokenized and indexed once, cached on disk keyed by their content, and mapped.

Where an answer quotes text the prompt does not hold (another file of the project
being edited, a document's usual phrasing), what followed the longest match of the
context's tail in the corpus is a free draft (river_cpp.decoding.drafts.RecallDraft),
verified as any other.

Only what the caller names is read: the named files, and in a named folder every
text file below it, except hidden entries, symbolic links and __pycache__. The
index (river_cpp.decoding.suffix_index) is stored under the cache folder by a hash
of the tokenizer and of the files' bytes, so a changed file builds a new one and
the same files under another path reuse it; it is loaded memory-mapped, so the
operating system pages in only what lookups touch.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, Union

import numpy as np

from river_cpp.decoding.suffix_index import SuffixIndex
from river_cpp.engine.compute.tokenizer import Tokenizer
from river_cpp.engine.files.cache import cache_dir

# Files larger than this in a named folder are left out (data, not text to draft
# from); a file named on its own is read whatever its size.
MAX_FOLDER_FILE_BYTES = 4 << 20
_CACHE_SUBDIR = "draft-corpus"
_SKIPPED_DIRS = ("__pycache__",)
_LOADED_MAX = 4  # corpus indexes kept open in the process

PathLike = Union[str, os.PathLike]


@dataclass(frozen=True)
class CorpusIndex:
    """A corpus's index, the number of files it holds and its key (the content hash)."""

    index: SuffixIndex
    files: int
    key: str

    @property
    def tokens(self) -> int:
        """Tokens indexed (one separator per file not counted)."""
        return len(self.index) - self.files


def corpus_files(paths: Sequence[PathLike]) -> list[Path]:
    """The text files `paths` name, in a stable order: each named file, and the text
    files under each named folder (see the module's docstring). FileNotFoundError
    for a path that does not exist, ValueError for a named file that is not UTF-8
    text or a corpus with no text at all."""
    files: list[Path] = []
    for named in paths:
        path = Path(named)
        if path.is_file():
            if _text(path) is None:
                raise ValueError(f"the corpus file {path} is not UTF-8 text")
            files.append(path)
        elif path.is_dir():
            files.extend(_folder_files(path))
        else:
            raise FileNotFoundError(f"corpus path not found: {path}")
    if not files:
        raise ValueError(f"the corpus {', '.join(map(str, paths))} holds no text files")
    return files


def _folder_files(folder: Path) -> list[Path]:
    found = []
    for root, dirs, names in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED_DIRS)
        for name in sorted(names):
            path = Path(root) / name
            if name.startswith(".") or path.is_symlink() or path.stat().st_size > MAX_FOLDER_FILE_BYTES:
                continue
            if _text(path) is not None:
                found.append(path)
    return found


def _text(path: Path) -> Union[str, None]:
    """The file's text, or None if it is not UTF-8 text (binary: a NUL byte)."""
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


_fingerprints: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def tokenizer_fingerprint(tokenizer: Tokenizer) -> str:
    """A hash of the vocabulary (every token's bytes) and of how it splits a probe
    text: the corpus's token ids are valid only for a tokenizer with the same one."""
    known = _fingerprints.get(tokenizer)
    if known is None:
        digest = hashlib.sha256(f"{tokenizer.n_vocab}\n".encode())
        for token in range(tokenizer.n_vocab):
            piece = tokenizer.detokenize_bytes([token])
            digest.update(len(piece).to_bytes(4, "little") + piece)
        probe = "def f(x):\n    return {'a': [1, 2.5]}  # Ünïcode, 中文\n"
        digest.update(np.asarray(tokenizer.tokenize(probe, add_bos=False), dtype=np.int64).tobytes())
        known = _fingerprints[tokenizer] = digest.hexdigest()
    return known


_loaded: OrderedDict[tuple, CorpusIndex] = OrderedDict()


def load_corpus(tokenizer: Tokenizer, paths: Sequence[PathLike]) -> CorpusIndex:
    """The index of the corpus `paths` name for `tokenizer`: from this process's
    recent ones while no file's size or modification time changed, else from the
    cache folder by content, else built and stored there."""
    files = corpus_files(paths)
    fingerprint = tokenizer_fingerprint(tokenizer)
    stamp = (fingerprint, tuple((str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files))
    if stamp in _loaded:
        _loaded.move_to_end(stamp)
        return _loaded[stamp]
    texts = [_text(f) or "" for f in files]
    digest = hashlib.sha256(fingerprint.encode())
    for text in texts:
        data = text.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little") + data)
    key = digest.hexdigest()[:32]
    folder = cache_dir() / _CACHE_SUBDIR / key
    index = _read(folder)
    if index is None:
        index = SuffixIndex.build(tokenizer.tokenize(text, add_bos=False) for text in texts)
        _write(folder, index)
        index = _read(folder) or index
    corpus = _loaded[stamp] = CorpusIndex(index, len(files), key)
    while len(_loaded) > _LOADED_MAX:
        _loaded.popitem(last=False)
    return corpus


def _read(folder: Path) -> Union[SuffixIndex, None]:
    """The stored index in `folder`, memory-mapped; None if absent or unusable."""
    try:
        tokens = np.load(folder / "tokens.npy", mmap_mode="r")
        order = np.load(folder / "order.npy", mmap_mode="r")
    except (OSError, ValueError):
        return None
    if tokens.dtype != np.int32 or order.dtype != np.int32 or tokens.ndim != 1 or order.ndim != 1:
        return None
    if len(order) and (int(order.max()) >= len(tokens) or int(order.min()) < 1):
        return None
    return SuffixIndex(tokens, order)


def _write(folder: Path, index: SuffixIndex) -> None:
    """Store `index` in `folder` whole or not at all (written aside, then renamed)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".building-"))
    try:
        np.save(staging / "tokens.npy", np.asarray(index.tokens, dtype=np.int32))
        np.save(staging / "order.npy", np.asarray(index.order, dtype=np.int32))
        try:
            os.rename(staging, folder)
        except OSError:  # another process stored it first, or a broken one is in the way
            if _read(folder) is None:
                shutil.rmtree(folder, ignore_errors=True)
                os.rename(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
