"""N-gram drafts from the context (prompt lookup): the tokens that followed the last
place where the context's last n tokens occurred before.

Where the output repeats its input (an edited function, a rewritten paragraph, an
answer quoting a pasted text), that continuation is accepted many tokens at a time
and costs nothing to propose. Indexed incrementally: each new token adds one entry
per n-gram size, and a lookup is one dictionary probe per size, microseconds at any
context length.
"""

from __future__ import annotations

from typing import Sequence

DEFAULT_NGRAM_MIN = 1
# Up to 6: each size keeps its own statistics, and a long match is the better bet. On
# recorded traces the tokens after a 3-token match were kept at 0.6-0.8 per token, after
# a match the text extended to 6 or more tokens at 0.85-0.98; replayed on the 0.5B's
# input-grounded prompts, sizes up to 6 drafted 3.08x against 2.84x with up to 3, and
# chat within 1% (docs/results.md).
DEFAULT_NGRAM_MAX = 6


class NgramIndex:
    """For each n in [n_min, n_max]: the n-gram -> where its most recent earlier
    occurrence ended (the position of the token that followed it).

    >>> index = NgramIndex(1, 2)
    >>> index.extend([5, 6, 7, 5, 6])
    >>> index.propose(4)
    ([7, 5, 6, 7], 2)
    """

    def __init__(self, n_min: int = DEFAULT_NGRAM_MIN, n_max: int = DEFAULT_NGRAM_MAX) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError(f"n-gram sizes need 1 <= n_min <= n_max, got {n_min} and {n_max}")
        self.n_min, self.n_max = n_min, n_max
        self.tokens: list[int] = []
        self._ends: list[dict[tuple[int, ...], int]] = [{} for _ in range(n_max + 1)]

    def extend(self, tokens: Sequence[int]) -> None:
        """Append tokens to the context."""
        for token in tokens:
            # Every n-gram ending at the current last token gains a continuation: `token`.
            end = len(self.tokens)
            for n in range(self.n_min, min(self.n_max, end) + 1):
                self._ends[n][tuple(self.tokens[end - n :])] = end
            self.tokens.append(int(token))

    def propose(self, max_tokens: int, tail: Sequence[int] = ()) -> tuple[list[int], int]:
        """`max_tokens` tokens that followed the most recent earlier occurrence of the
        longest n-gram (n_max down to n_min) the context ends with, and that n; ([], 0)
        if none matches. `tail`: tokens not in the context yet (a draft's own) that the
        n-gram ends with, after the context's.

        A continuation that runs into the present repeats itself, as an overlapping
        copy does: after [5, 6, 7, 5, 6] the match (5, 6) proposes 7, 5, 6, 7, ...
        (text that loops, a list's repeated structure; stopping there proposed one or
        two tokens a round where the output repeated a short cycle)."""
        recent = self.tokens[max(len(self.tokens) - self.n_max, 0) :] + list(tail)
        for n in range(min(self.n_max, len(recent)), self.n_min - 1, -1):
            start = self._ends[n].get(tuple(recent[len(recent) - n :]))
            if start is not None:
                return self._continuation(start, max_tokens, tail), n
        return [], 0

    def _continuation(self, start: int, max_tokens: int, tail: Sequence[int]) -> list[int]:
        """max_tokens tokens from position `start` of the context followed by `tail`,
        repeating the span from `start` to the end once it is used up."""
        if start + max_tokens <= len(self.tokens):
            return self.tokens[start : start + max_tokens]
        known = self.tokens[start:] + list(tail)  # a short span: start is near the end
        return [known[i % len(known)] for i in range(max_tokens)]
