"""Where a context's last tokens occurred in other text, and what followed them there.

The index over some documents of token ids (earlier calls' prompts and outputs, a
corpus's files): the documents' tokens in one array, separated, and every position
that has a next token sorted by the tokens *before* it, read backwards. The positions
after an occurrence of the context's last m tokens are then one contiguous range of
that order, and the range for m + 1 tokens lies inside the range for m: one narrowing
walk over the context's tail, from its last token back, finds the longest match of
any length (up to MATCH_DEPTH) in O(m log N) comparisons. A longer match is the
better bet (SuffixDecoding, arXiv 2411.04975, drafts longer where its match is
longer), and the drafting statistics are kept per match length (match_bucket).

Two numpy arrays of int32, 8 bytes a token, which a corpus keeps on disk and maps
(river_cpp.decoding.draft_corpus). Built by prefix doubling over the first
MATCH_DEPTH tokens only: each doubling sorts once, so a build is a few sorts of N
keys, 0.1-0.2 s for a million tokens.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Iterable, Sequence

import numpy as np

# Between documents: no match or continuation crosses it (a token id is never negative).
SEPARATOR = -1
# Matches are sought up to this many tokens; positions whose preceding MATCH_DEPTH
# tokens are equal stay in no particular order.
MATCH_DEPTH = 32
# Match lengths whose drafting statistics are kept together: a match of 5 tokens
# counts under 4, one of 40 under 32.
MATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
# A drafted token needs this share of the match's occurrences going on with it
# (propose); one occurrence alone is followed wherever it goes.
CONFIDENCE = 0.5
# Occurrences that vote on a continuation at most (the latest ones).
_VOTERS = 512
# A range this short is narrowed in one numpy search over its column rather than by
# bisecting position by position.
_SCAN = 256


def match_bucket(length: int) -> int:
    """The bucket whose drafting statistics a match of `length` tokens counts under.

    >>> match_bucket(5), match_bucket(40)
    (4, 32)
    """
    return max(b for b in MATCH_BUCKETS if b <= max(length, 1))


class _Column:
    """The token `depth` places before each sorted position, as a read-only sequence
    for bisect (SEPARATOR-1 before the start of the array)."""

    def __init__(self, tokens: np.ndarray, order: np.ndarray, depth: int) -> None:
        self.tokens, self.order, self.depth = tokens, order, depth

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, i: int) -> int:
        at = int(self.order[i]) - 1 - self.depth
        return int(self.tokens[at]) if at >= 0 else SEPARATOR - 1


class SuffixIndex:
    """Documents of token ids, and their positions sorted by the tokens before each
    (see the module's docstring). `tokens`: the documents, each followed by SEPARATOR;
    `order`: the positions p with a real token before and at p, sorted."""

    def __init__(self, tokens: np.ndarray, order: np.ndarray) -> None:
        if tokens.ndim != 1 or order.ndim != 1:
            raise ValueError("a suffix index needs one-dimensional token and order arrays")
        self.tokens = tokens
        self.order = order

    @classmethod
    def build(cls, documents: Iterable[Sequence[int]]) -> SuffixIndex:
        """The index of `documents` (sequences of non-negative token ids)."""
        parts = []
        for document in documents:
            ids = np.asarray(document, dtype=np.int64)
            if ids.size and ids.min() < 0:
                raise ValueError("token ids must be non-negative")
            parts.extend((ids, np.array([SEPARATOR])))
        tokens = np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)
        return cls(tokens, sort_positions(tokens))

    def __len__(self) -> int:
        """Tokens held, separators included."""
        return len(self.tokens)

    def longest_match(self, context: Sequence[int], max_length: int = MATCH_DEPTH) -> tuple[int, int, int]:
        """(m, lo, hi): the most tokens m (at most max_length and MATCH_DEPTH) that the
        context ends with and that occur in the index, and the range [lo, hi) of
        `order` whose positions follow such an occurrence; (0, 0, 0) if even its
        last token occurs nowhere."""
        lo, hi, m = 0, len(self.order), 0
        depth = min(max_length, MATCH_DEPTH, len(context))
        while m < depth and hi > lo:
            if hi - lo == 1 and m:  # one occurrence left: the rest of its match in one comparison
                end = int(self.order[lo]) - m
                before = np.asarray(self.tokens[max(end - (depth - m), 0) : end])[::-1]
                wanted = np.asarray(context[len(context) - depth : len(context) - m])[::-1]
                differ = np.flatnonzero(before != wanted[: len(before)])
                return m + (int(differ[0]) if differ.size else len(before)), lo, hi
            token = int(context[len(context) - 1 - m])
            if hi - lo <= _SCAN:
                at = self.order[lo:hi].astype(np.int64) - 1 - m
                column = np.where(at >= 0, self.tokens[np.maximum(at, 0)], SEPARATOR - 1)
                new_lo = lo + int(np.searchsorted(column, token, "left"))
                new_hi = lo + int(np.searchsorted(column, token, "right"))
            else:
                column = _Column(self.tokens, self.order, m)
                new_lo = bisect_left(column, token, lo, hi)
                new_hi = bisect_right(column, token, new_lo, hi)
            if new_lo == new_hi:
                break
            lo, hi, m = new_lo, new_hi, m + 1
        return (m, lo, hi) if m else (0, 0, 0)

    def continuation(self, position: int, max_tokens: int) -> list[int]:
        """Up to max_tokens tokens from `position`, ending at the document's end."""
        ahead = self.tokens[position : position + max_tokens]
        stops = np.flatnonzero(ahead == SEPARATOR)
        return ahead[: stops[0] if stops.size else len(ahead)].tolist()

    def occurrences(self, context: Sequence[int], min_match: int = 1) -> tuple[int, np.ndarray]:
        """(m, positions): the longest match of the context's tail (m tokens, at least
        min_match) and the positions after its occurrences, at most the latest
        _VOTERS of them; (0, empty) if none."""
        m, lo, hi = self.longest_match(context)
        if m < min_match:
            return 0, np.zeros(0, np.int64)
        positions = self.order[lo:hi].astype(np.int64)
        if len(positions) > _VOTERS:
            positions = np.partition(positions, len(positions) - _VOTERS)[-_VOTERS:]
        return m, positions

    def propose(
        self, context: Sequence[int], max_tokens: int, min_match: int = 1, min_confidence: float = CONFIDENCE
    ) -> tuple[list[int], int, int]:
        """(tokens, m, position): up to max_tokens tokens that followed the longest
        match of the context's tail (m tokens, at least min_match), as its
        occurrences vote (vote), and the position the first came from; ([], 0, -1)
        if none."""
        m, positions = self.occurrences(context, min_match)
        tokens, (_, position) = vote([(self.tokens, positions)], max_tokens, min_confidence)
        return (tokens, m, position) if tokens else ([], 0, -1)


def vote(
    parts: Sequence[tuple[np.ndarray, np.ndarray]], max_tokens: int, min_confidence: float = CONFIDENCE
) -> tuple[list[int], tuple[int, int]]:
    """The continuation the occurrences of a match agree on, and (part, position) of
    the latest occurrence it follows ((-1, -1) if none). `parts`: (tokens, positions)
    of the occurrences in each of several token arrays, newest array first.

    Each token is the one most of the occurrences still agreeing go on with (the
    newest occurrence's on a tie), and the draft ends before its share of all the
    occurrences falls below min_confidence. After the same JSON key in twelve
    earlier answers the twelve values differ, and the draft stops before the value;
    after the value the next key follows in all of them, and is drafted whole
    (SuffixDecoding's frequency-scored tree does the same)."""
    voters = sum(len(positions) for _, positions in parts)
    live = [(i, tokens, positions) for i, (tokens, positions) in enumerate(parts) if len(positions)]
    drafted: list[int] = []
    first = (-1, -1)
    while live and len(drafted) < max_tokens:
        ahead = [tokens[positions + len(drafted)] for _, tokens, positions in live]
        going_on = np.concatenate(ahead)
        going_on = going_on[going_on != SEPARATOR]
        if not going_on.size:
            break
        values, counts = np.unique(going_on, return_counts=True)
        most = counts.max()
        if most / voters < min_confidence:
            break
        tied = values[counts == most]
        token = int(tied[0])
        if len(tied) > 1:  # the newest occurrence's token among the tied
            part = next(k for k, next_tokens in enumerate(ahead) if np.isin(next_tokens, tied).any())
            _, tokens, positions = live[part]
            token = int(tokens[positions[np.isin(ahead[part], tied)].max() + len(drafted)])
        kept = [(i, tokens, positions[a == token]) for (i, tokens, positions), a in zip(live, ahead)]
        live = [(i, tokens, positions) for i, tokens, positions in kept if len(positions)]
        if not drafted:
            first = (live[0][0], int(live[0][2].max()))
        drafted.append(token)
    return drafted, first


def sort_positions(tokens: np.ndarray) -> np.ndarray:
    """The positions p of `tokens` with a real token at p - 1 and at p, sorted by
    tokens[p - 1], tokens[p - 2], ... (up to MATCH_DEPTH of them; before the array's
    start counts below every token), as int32. Prefix doubling: the rank of the
    2h tokens before p is the pair (rank of the h before p, rank of the h before p - h)."""
    n = len(tokens)
    if n == 0:
        return np.zeros(0, np.int32)
    # key[p]: the token before p; p = 0 has none (rank 0, below SEPARATOR's rank)
    before = np.concatenate(([SEPARATOR - 1], tokens.astype(np.int64)))
    rank = np.unique(before, return_inverse=True)[1].astype(np.int64)
    h = 1
    while h < MATCH_DEPTH:
        shifted = np.zeros_like(rank)
        shifted[h:] = rank[:-h]
        rank = np.unique(rank * (int(rank.max()) + 1) + shifted, return_inverse=True)[1].astype(np.int64)
        h *= 2
    positions = np.flatnonzero((before[:-1] >= 0) & (tokens >= 0)).astype(np.int64)
    order = positions[np.argsort(rank[positions], kind="stable")]
    return order.astype(np.int32)
