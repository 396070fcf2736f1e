"""Drafts from earlier calls on the same model: the memory of their prompts and outputs.

People who use a model for work repeat themselves across requests: the same JSON
fields for every document, the same project's code, an answer that reuses an earlier
one. The context's own n-grams (river_cpp.decoding.ngram) cannot see text that is no
longer in the prompt; this memory holds each finished call's tokens (prompt and
output), and a draft source proposes what followed the longest match of the current
context's tail there (river_cpp.decoding.drafts.RecallDraft). The drafts are verified
as any other, so the output is the backbone's either way.

Bounded: at most `capacity` tokens; past it the least recently used documents go (a
document is used when it is added, and when a draft is taken from it). A chat's next
prompt holds the previous call's whole text, so a document that a new one begins with
is replaced by it rather than kept twice.

One memory per backbone object (memory_of), held weakly: it never crosses models. A
memory follows one call at a time (begin, note), so on a model of several sequences
each sequence's backbone has its own (river_cpp.engine.compute.backbone.drafting_home). The
server shares it between requests only where its operator opts in (--share-drafts).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Optional, Sequence

import numpy as np

from river_cpp.decoding.suffix_index import SuffixIndex, vote

DEFAULT_MEMORY_TOKENS = 1 << 18
# Eviction frees down to this share of the capacity, so that a full memory is not
# rebuilt after every call.
_LOW_WATER = 0.75
# The newest documents are indexed apart and merged into the main index once they
# reach this share of it: each call then sorts only its own tokens (a rebuild of the
# whole memory is 0.1-0.3 s at full capacity on a loaded machine).
_MERGE_SHARE = 0.25


class _Indexed:
    """A SuffixIndex over some documents, and which document each position is in."""

    def __init__(self, documents: OrderedDict[int, np.ndarray], ids: Sequence[int]) -> None:
        self.ids = list(ids)
        self.index = SuffixIndex.build(documents[i] for i in self.ids)
        sizes = [len(documents[i]) + 1 for i in self.ids]  # each followed by a separator
        self.starts = np.cumsum([0] + sizes[:-1]) if sizes else np.zeros(0, np.int64)

    def document_at(self, position: int) -> int:
        return self.ids[int(np.searchsorted(self.starts, position, "right")) - 1]


class DraftMemory:
    """Earlier calls' token sequences, least recently used first, and their index."""

    def __init__(self) -> None:
        self._documents: OrderedDict[int, np.ndarray] = OrderedDict()
        self._next_id = 0
        self._tokens = 0
        self._main: Optional[_Indexed] = None
        self._fresh: Optional[_Indexed] = None
        self._pending: Optional[list[int]] = None  # the running call's history (a live list)

    @property
    def tokens(self) -> int:
        """Tokens held (the running call's not counted until it ends)."""
        return self._tokens

    @property
    def documents(self) -> int:
        return len(self._documents)

    def begin(self, history: list[int], capacity: int) -> None:
        """A call starts with `history`: the previous call's tokens are added (its
        history list is complete now), and this call's list is kept to be added
        when the next begins (note() follows it round by round)."""
        if self._pending is not None:
            self.add(self._pending, capacity)
        self._pending = history

    def note(self, history: list[int]) -> None:
        """The running call's history after a round (to be added when the next call begins)."""
        self._pending = history

    def add(self, tokens: Sequence[int], capacity: int) -> None:
        """Remember `tokens` as a document, then evict down to `capacity` tokens."""
        if capacity < 1:
            raise ValueError(f"the memory's capacity must be at least 1 token, got {capacity}")
        ids = np.asarray(tokens, dtype=np.int32)[-capacity:]
        if ids.size == 0:
            return
        for key, document in list(self._documents.items()):
            if len(document) <= len(ids) and np.array_equal(document, ids[: len(document)]):
                self._drop(key)  # the new one continues it (a chat's next turn)
            elif len(document) > len(ids) and np.array_equal(document[: len(ids)], ids):
                self._documents.move_to_end(key)  # held already (a repeated call)
                return
        self._documents[self._next_id] = ids
        self._next_id += 1
        self._tokens += len(ids)
        if self._tokens > capacity:
            while self._tokens > _LOW_WATER * capacity and len(self._documents) > 1:
                self._drop(next(iter(self._documents)))
            self._main, self._fresh = None, None
        self._reindex()

    def _drop(self, key: int) -> None:
        self._tokens -= len(self._documents.pop(key))
        if self._main is not None and key in self._main.ids:
            self._main, self._fresh = None, None
        elif self._fresh is not None and key in self._fresh.ids:
            self._fresh = None

    def _reindex(self) -> None:
        """Index the documents not in the main index apart, or everything anew once
        those are _MERGE_SHARE of it."""
        main_ids = self._main.ids if self._main is not None else []
        known = set(main_ids)
        new = [key for key in self._documents if key not in known]
        new_tokens = sum(len(self._documents[key]) for key in new)
        if self._main is None or new_tokens > _MERGE_SHARE * len(self._main.index):
            self._main, self._fresh = _Indexed(self._documents, sorted(self._documents)), None
        else:
            self._fresh = _Indexed(self._documents, new) if new else None

    def propose(self, context: Sequence[int], max_tokens: int, min_match: int) -> tuple[list[int], int]:
        """Up to max_tokens tokens that followed the longest match (at least
        min_match tokens) of the context's tail in the memory, as its occurrences
        vote (river_cpp.decoding.suffix_index.vote), and the match's length; ([], 0)
        if none. Marks the document drawn from as used."""
        parts = [part for part in (self._fresh, self._main) if part is not None]
        found = [part.index.occurrences(context, min_match) for part in parts]
        m = max((length for length, _ in found), default=0)
        if not m:
            return [], 0
        voting = [(part, positions) for part, (length, positions) in zip(parts, found) if length == m]
        tokens, (which, position) = vote([(part.index.tokens, positions) for part, positions in voting], max_tokens)
        if not tokens:
            return [], 0
        self._documents.move_to_end(voting[which][0].document_at(position))
        return tokens, m


_memories: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def memory_of(model: object) -> DraftMemory:
    """The memory of calls on `model`, the backbone the loop runs on (a RiverModel's
    is model.backbone; created on first use, gone with the model).
    TypeError for a model that takes no weak references: a memory kept by id could
    outlive it and serve its text to another model."""
    try:
        return _memories.setdefault(model, DraftMemory())
    except TypeError:
        kind = type(model).__name__
        raise TypeError(f"a draft memory needs a model that takes weak references, not {kind}") from None


def forget_memory_of(model: object) -> None:
    """Drop the memory of calls on `model` (the next call starts an empty one)."""
    _memories.pop(model, None)
