"""The arithmetic of a drafted round, in one place: what k drafted tokens yield and
what they cost, for the loop's adaptive length (river_cpp.decoding.draft_length) and
the river choice's promise (river_cpp.engine.decisions.river_choice).

With per-token acceptance a (each drafted token kept with probability a when every one
before it was), k drafted tokens keep a(1 - a^k)/(1 - a) of them on average, and the
round emits those plus the backbone's own next token. It costs k drafted tokens and one
verify of k + 1 positions. Costs are in any one unit (seconds, or plain steps).
"""

from __future__ import annotations

from typing import Callable

# The longest round Speculative drafts by default, and the longest the river choice weighs.
DEFAULT_MAX_DRAFT = 8


def expected_accepted(acceptance: float, n: int) -> float:
    """Drafts kept on average among n, each kept with probability `acceptance` when
    every one before it was (capped below 1, where the closed form divides by 0)."""
    a = min(acceptance, 0.999)
    return a * (1 - a**n) / (1 - a)


def round_rate(acceptance: float, k: int, draft_cost: float, verify_cost: float) -> float:
    """Tokens per unit of cost of a round of k drafted tokens at `draft_cost` each,
    verified at `verify_cost` (the cost of verifying k + 1 positions): the kept drafts
    and the backbone's own token after them."""
    return (1 + expected_accepted(acceptance, k)) / (k * draft_cost + verify_cost)


def best_round(
    acceptance: float, draft_cost: float, verify: Callable[[int], float], max_draft: int = DEFAULT_MAX_DRAFT
) -> tuple[int, float]:
    """(k, tokens per plain step) of the best round length k <= max_draft for a draft
    kept with `acceptance` per token at `draft_cost` steps a token, with verify(n) the
    cost of verifying n positions in plain steps; (0, 1.0) where no round beats plain
    decoding.

    >>> k, speedup = best_round(0.9, 0.25, lambda n: 1 + 0.1 * (n - 1))
    >>> k, round(speedup, 2)
    (4, 1.71)
    """
    best = (0, 1.0)
    for k in range(1, max_draft + 1):
        rate = round_rate(acceptance, k, draft_cost, verify(k + 1))
        if rate > best[1]:
            best = (k, rate)
    return best
