"""N-gram drafts from the context: the longest match wins, the most recent occurrence
is used, and the index grows incrementally."""

import random

import pytest

from river_cpp.decoding.ngram import NgramIndex


def test_the_longest_ngram_match_proposes_its_continuation():
    index = NgramIndex(1, 3)
    index.extend([1, 2, 3, 9, 9, 2, 3, 7, 8, 5, 2, 3])
    # (5, 2, 3) never occurred; (2, 3) last occurred before 7; (3,) too
    assert index.propose(3) == ([7, 8, 5], 2)
    index.extend([7])
    assert index.propose(2) == ([8, 5], 3)  # (2, 3, 7) occurred before 8


def test_the_most_recent_occurrence_is_used():
    index = NgramIndex(1, 1)
    index.extend([4, 1, 4, 2, 4])
    assert index.propose(1) == ([2], 1)


def test_no_match_proposes_nothing():
    index = NgramIndex(2, 3)
    index.extend([1, 2, 3, 4])
    assert index.propose(8) == ([], 0)
    assert NgramIndex().propose(4) == ([], 0)


def test_a_continuation_that_reaches_the_present_repeats_itself():
    index = NgramIndex(1, 2)
    index.extend([1, 2, 1])
    assert index.propose(5) == ([2, 1, 2, 1, 2], 1)  # the cycle (2, 1), as an overlapping copy
    index.extend([5, 6, 7, 5, 6])
    assert index.propose(4) == ([7, 5, 6, 7], 2)
    # through a draft's own tokens: (6, 7) occurred before 5; then 5, 6, 7, then the cycle again
    assert index.propose(6, tail=[7]) == ([5, 6, 7, 5, 6, 7], 2)


def test_a_tail_not_in_the_context_extends_the_ngram():
    index = NgramIndex(1, 3)
    index.extend([1, 2, 3, 4, 9, 1])
    # The draft's own tokens (2, 3) after the context's 1: (1, 2, 3) occurred before 4.
    assert index.propose(2, tail=[2, 3]) == ([4, 9], 3)
    assert index.propose(8, tail=[7]) == ([], 0)  # nothing ever followed 7
    assert index.propose(8, tail=[]) == index.propose(8)


def test_invalid_sizes():
    with pytest.raises(ValueError, match="n_min"):
        NgramIndex(0, 2)
    with pytest.raises(ValueError, match="n_min"):
        NgramIndex(3, 2)


class _CountingList(list):
    """A list that counts the items read through indexing and slicing."""

    read = 0

    def __getitem__(self, key):
        item = super().__getitem__(key)
        _CountingList.read += len(item) if isinstance(key, slice) else 1
        return item


def test_a_lookup_reads_a_few_tokens_whatever_the_context_length():
    """A lookup probes one dictionary entry per n-gram size: it reads the last n_max
    tokens per size and the proposal, never the context (so microseconds at 4k)."""
    random.seed(0)
    for length in (64, 4096):
        index = NgramIndex(1, 3)
        index.extend([random.randrange(500) for _ in range(length)])
        index.tokens = _CountingList(index.tokens)
        _CountingList.read = 0
        for _ in range(100):
            index.propose(8)
        assert _CountingList.read <= 100 * (1 + 2 + 3 + 8)
