"""river_cpp.decoding.suffix_index: the longest match of a context's tail, against a
brute-force search over every position."""

from __future__ import annotations

import numpy as np
import pytest

from river_cpp.decoding.suffix_index import MATCH_DEPTH, SEPARATOR, SuffixIndex, match_bucket


def brute_force(tokens: list[int], context: list[int]) -> tuple[int, set[int]]:
    """(m, positions): the longest match of the context's tail (at most MATCH_DEPTH)
    ending right before a position that has a real token before and at it."""
    best, ends = 0, set()
    for p in range(1, len(tokens)):
        if tokens[p] == SEPARATOR or tokens[p - 1] == SEPARATOR:
            continue
        k = 0
        while k < min(len(context), MATCH_DEPTH) and p - 1 - k >= 0 and tokens[p - 1 - k] == context[-1 - k]:
            k += 1
        if k > best:
            best, ends = k, {p}
        elif k == best and k:
            ends.add(p)
    return best, ends


@pytest.mark.parametrize("alphabet, longest", [(4, 30), (3, 700), (50, 40)])
def test_longest_match_is_the_brute_forces(alphabet, longest):
    """Small alphabets make long matches and wide ranges (the bisecting path), large
    ones short matches (the scanning path)."""
    rng = np.random.default_rng(alphabet)
    for _ in range(60):
        documents = [rng.integers(0, alphabet, rng.integers(0, longest)).tolist() for _ in range(rng.integers(1, 5))]
        index = SuffixIndex.build(documents)
        context = rng.integers(0, alphabet, rng.integers(1, 40)).tolist()
        m, lo, hi = index.longest_match(context)
        best, ends = brute_force(index.tokens.tolist(), context)
        assert m == best
        assert set(index.order[lo:hi].tolist()) == ends


def test_long_repeats_match_up_to_the_depth():
    text = list(range(100))
    index = SuffixIndex.build([text, text])
    m, _, _ = index.longest_match(text[:60])
    assert m == MATCH_DEPTH
    tokens, m, position = index.propose(text[:60], 5)
    assert tokens == text[60:65] and position == 101 + 60  # the later copy


def test_continuation_ends_with_its_document():
    index = SuffixIndex.build([[1, 2, 3], [4, 5, 6, 7]])
    assert index.propose([9, 1, 2], 8)[:2] == ([3], 2)
    assert index.propose([5], 8)[:2] == ([6, 7], 1)
    assert index.propose([3], 8) == ([], 0, -1)  # 3 ends its document: nothing follows
    assert index.propose([8, 9], 8) == ([], 0, -1)


def test_min_match_and_latest_occurrence():
    index = SuffixIndex.build([[1, 2, 3, 4], [7, 2, 3, 5]])
    assert index.propose([2, 3], 2, min_match=2)[:2] == ([5], 2)  # the later document
    assert index.propose([8, 3], 2, min_match=2) == ([], 0, -1)
    assert index.propose([1, 2, 3], 2, min_match=2)[:2] == ([4], 3)  # the longer match wins


def test_occurrences_vote_on_the_continuation():
    agreeing = SuffixIndex.build([[5, 1, 2, 9, 4], [6, 1, 2, 9, 3], [7, 1, 2, 8, 3]])
    assert agreeing.propose([1, 2], 4)[:2] == ([9], 2)  # 2 of 3 go on with 9, then 4 and 3 split
    assert agreeing.propose([1, 2], 4, min_confidence=0.7) == ([], 0, -1)
    # the same key in each earlier answer, different values after it: drafted up to the value
    answers = SuffixIndex.build([[1, 2, 3, 4, 10, 20], [1, 2, 3, 4, 11, 20], [1, 2, 3, 4, 12, 20]])
    assert answers.propose([1], 8)[:2] == ([2, 3, 4], 1)
    assert answers.propose([10], 8)[:2] == ([20], 1)  # one occurrence: followed wherever it goes
    tie = SuffixIndex.build([[1, 7], [1, 8]])
    assert tie.propose([1], 4)[:2] == ([8], 1)  # the newer occurrence wins a tie


def test_empty_index_and_bad_ids():
    assert SuffixIndex.build([]).propose([1, 2], 4) == ([], 0, -1)
    assert SuffixIndex.build([[]]).propose([1], 4) == ([], 0, -1)
    with pytest.raises(ValueError, match="non-negative"):
        SuffixIndex.build([[1, -3]])


def test_match_buckets():
    assert [match_bucket(m) for m in (1, 2, 3, 4, 5, 7, 8, 11, 15, 23, 31, 32, 90)] == [
        1, 2, 3, 4, 4, 6, 8, 8, 12, 16, 24, 32, 32
    ]  # fmt: skip
