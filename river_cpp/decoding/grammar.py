"""Grammar-constrained decoding on llama.cpp's own grammar engine.

A GBNF grammar (or a JSON schema, through llama-cpp-python's converter) is compiled
by llama.cpp's grammar sampler for the model's vocabulary (llama_sampler_init_grammar
through llama-cpp-python's C API); nothing here parses grammars. A GrammarState is
the grammar after the tokens accepted so far: it says which tokens may come next
(river_cpp.decoding.sampling asks it, after the bias and penalties, before top-k) and
is cloned where a speculative round needs the state after each drafted token.

llama.cpp aborts the process when its grammar accepts a token it does not allow, so
accept() checks first and never hands such a token over.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import tempfile
import weakref
from typing import Any, Mapping, Optional, Union

import llama_cpp
import numpy as np
from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

# The data llama.cpp's samplers work on, as a numpy record laid out like
# llama_token_data (id, logit, p): an array of these is handed over without copies.
_TOKEN_DATA = np.dtype([("id", np.intc), ("logit", np.float32), ("p", np.float32)], align=True)
assert _TOKEN_DATA.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)


class GrammarError(ValueError):
    """A grammar or JSON schema that cannot be compiled."""


def schema_grammar(schema: Union[Mapping[str, Any], bool]) -> str:
    """The GBNF of a JSON schema (llama-cpp-python's converter); GrammarError naming
    what it refused (a recursive $ref it cannot resolve, an unknown type, ...)."""
    if not isinstance(schema, (Mapping, bool)):
        raise GrammarError(f"a JSON schema must be an object, got {type(schema).__name__}")
    try:
        return json_schema_to_gbnf(json.dumps(schema))
    except RecursionError:
        raise GrammarError("the JSON schema is too deeply nested or recursive to convert to a grammar") from None
    except Exception as error:  # the converter raises bare Exceptions, KeyErrors, ...
        reason = f"{type(error).__name__}: {error}"
        raise GrammarError(f"the JSON schema cannot be converted to a grammar: {reason}") from None


def json_grammar() -> str:
    """The GBNF of any JSON object (response_format {"type": "json_object"})."""
    return JSON_GBNF


class _StderrCapture:
    """What is written to the process's stderr while compiling a grammar: llama.cpp's
    parser says what is wrong only there (fprintf and its log). Lines other threads
    write meanwhile land here too: they only make the error message longer."""

    def __init__(self) -> None:
        self.text = ""

    def __enter__(self) -> _StderrCapture:
        sys.stderr.flush()
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read().decode("utf-8", errors="replace")
        self._file.close()

    def reason(self) -> str:
        """The parser's complaint, e.g. "Undefined rule identifier 'foo'"."""
        lines = self.text.splitlines()
        for line in lines:
            if "error parsing grammar:" in line:
                return line.split("error parsing grammar:", 1)[1].strip()
        return next((line.strip() for line in lines if "recursion" in line or "rule" in line), "")


class _FirstBytes:
    """A vocabulary's tokens grouped by the first byte of their text, for forced():
    a token is legal only if a token of its first byte alone is (a grammar takes a
    prefix of what it takes), so the single-byte tokens tell which groups can hold
    legal tokens at all."""

    def __init__(self, tokenizer) -> None:
        n_vocab = tokenizer.n_vocab
        firsts = np.full(n_vocab, -1, dtype=np.int16)  # -1: no text (never legal) or end of generation
        single = np.full(256, -1, dtype=np.int64)
        for token in range(n_vocab):
            if tokenizer.is_end_of_generation(token):
                continue
            piece = tokenizer.detokenize_bytes([token], special=True)
            if piece:
                firsts[token] = piece[0]
                if len(piece) == 1:
                    single[piece[0]] = token
        self.end_of_generation = np.array(
            [t for t in range(n_vocab) if tokenizer.is_end_of_generation(t)], dtype=np.int64
        )
        order = np.argsort(firsts, kind="stable")
        bounds = np.searchsorted(firsts[order], np.arange(257))
        self.groups = [order[bounds[b] : bounds[b + 1]] for b in range(256)]
        present = np.array([self.groups[b].size > 0 for b in range(256)])
        self.probes = single[present & (single >= 0)]  # one single-byte token per group that has one
        self.probe_bytes = np.flatnonzero(present & (single >= 0))
        # groups without a single-byte token are always searched in full
        self.unprobed = np.concatenate([self.groups[b] for b in np.flatnonzero(present & (single < 0))] or [[]])
        self.unprobed = self.unprobed.astype(np.int64)


_first_bytes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _first_bytes_of(tokenizer) -> _FirstBytes:
    index = _first_bytes.get(tokenizer)
    if index is None:
        index = _first_bytes[tokenizer] = _FirstBytes(tokenizer)
    return index


class Grammar:
    """A GBNF grammar compiled for one tokenizer's vocabulary (river_cpp.engine.compute.tokenizer.
    Tokenizer, which must outlive the grammar and its states); start() gives its
    initial state."""

    def __init__(self, tokenizer, gbnf: str, root: str = "root") -> None:
        if not isinstance(gbnf, str) or not gbnf.strip():
            raise GrammarError("the grammar is empty")
        self.gbnf, self.root = gbnf, root
        self._tokenizer = tokenizer
        self.n_vocab = int(tokenizer.n_vocab)
        with _StderrCapture() as log:
            initial = llama_cpp.llama_sampler_init_grammar(tokenizer.vocab, gbnf.encode("utf-8"), root.encode("utf-8"))
        if not initial:
            reason = log.reason() or f"a syntax error, an undefined rule, left recursion, or no rule {root!r}"
            raise GrammarError(f"llama.cpp cannot compile the grammar: {reason}")
        self._initial = GrammarState(initial, self.n_vocab, lambda: _first_bytes_of(tokenizer))

    def start(self) -> GrammarState:
        """The state before any token."""
        return self._initial.clone()


class GrammarState:
    """The grammar after the tokens accepted so far (a llama.cpp grammar sampler)."""

    def __init__(self, sampler: Any, n_vocab: int, first_bytes: Any) -> None:
        self._sampler = sampler
        self._n_vocab = n_vocab
        self._first_bytes = first_bytes  # () -> _FirstBytes, built on first use
        self._free = weakref.finalize(self, llama_cpp.llama_sampler_free, sampler)

    def allowed(self, ids: np.ndarray) -> np.ndarray:
        """A boolean per token of `ids`: whether the grammar allows it next."""
        ids = np.asarray(ids)
        if ids.size == 0:
            return np.zeros(0, dtype=bool)
        if ids.min() < 0 or ids.max() >= self._n_vocab:
            raise ValueError(f"token ids must be in the vocabulary [0, {self._n_vocab})")
        data = np.zeros(ids.size, dtype=_TOKEN_DATA)
        data["id"] = ids
        array = llama_cpp.llama_token_data_array(
            data=data.ctypes.data_as(llama_cpp.llama_token_data_p), size=ids.size, selected=-1, sorted=False
        )
        llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(array))
        return np.isfinite(data["logit"])

    def allows(self, token: int) -> bool:
        return bool(self.allowed(np.array([token]))[0])

    def forced(self) -> Optional[int]:
        """The one token the grammar allows next, or None when it allows several or none.

        Asks about one single-byte token per first byte first: two legal ones mean two
        legal tokens; one means only tokens of that first byte can be legal, and only
        those (with the end-of-generation tokens and the bytes without a single-byte
        token) are asked about."""
        index = self._first_bytes()
        legal_bytes = index.probe_bytes[self.allowed(index.probes)]
        if legal_bytes.size > 1:
            return None
        candidates = [index.end_of_generation, index.unprobed]
        if legal_bytes.size == 1:
            candidates.append(index.groups[int(legal_bytes[0])])
        candidates = np.concatenate(candidates)
        legal = candidates[self.allowed(candidates)]
        return int(legal[0]) if legal.size == 1 else None

    def accept(self, token: int) -> None:
        """Advance past `token`; ValueError (instead of llama.cpp's abort) if it is not allowed."""
        if not self.allows(token):
            raise ValueError(f"the grammar does not allow token {token} here")
        llama_cpp.llama_sampler_accept(self._sampler, int(token))

    def clone(self) -> GrammarState:
        """An independent copy of this state."""
        return GrammarState(llama_cpp.llama_sampler_clone(self._sampler), self._n_vocab, self._first_bytes)
