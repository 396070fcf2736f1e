"""Which drafted tokens the backbone keeps: pure functions on distributions.

Every token of a generation is the backbone's own sample: at position i it is
sample(p_i, u_i), the inverse CDF (in token-id order) of the backbone's sampling
distribution p_i at the i-th uniform draw u_i of the generation's seeded stream, one
draw per token. The plain loop does exactly that, one token per forward. A
speculative round proposes drafted tokens, computes p for all of them in one
forward, and keeps a drafted token exactly when it is the sample the backbone takes
there with that position's draw; the first one that is not is replaced by that
sample. So for the same seed a speculative generation emits the same tokens as a
plain one, greedy or sampled, whatever drafted them.

A deterministic proposal x (an n-gram from the context) is kept with probability
p(x), as under the standard speculative-sampling rule (Leviathan et al. 2023, Chen et
al. 2023), and a rejected one is followed by a token distributed as p without x: the
standard rule, with the acceptance draw and the replacement draw made one. A
sampled draft (the river) proposes sample(q_i, u_i) with the same draw, so that it
is kept whenever the draft's and the backbone's inverse CDFs agree at u_i. Greedy
decoding is the case of every p with all its mass on the argmax.

Distributions are sparse, as the sampler gives them: (token ids, probabilities).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

Distribution = tuple[np.ndarray, np.ndarray]  # (token ids, probabilities summing to 1)


def sample(dist: Distribution, u: float) -> int:
    """The token at `u` in [0, 1) of dist's cumulative distribution, in token-id order."""
    ids, probs = dist
    if ids.size == 1:
        return int(ids[0])
    order = np.argsort(ids, kind="stable")
    cumulative = np.cumsum(probs[order])
    # u * total: probabilities that sum to 1 only within rounding still cover [0, 1).
    at = int(np.searchsorted(cumulative, u * cumulative[-1], side="right"))
    return int(ids[order[min(at, ids.size - 1)]])


def verify_drafts(
    drafts: Sequence[int], target: Callable[[int], Distribution], uniforms: Sequence[float]
) -> tuple[int, int]:
    """(how many leading `drafts` are kept, the token after them).

    target(j): the backbone's distribution at draft position j (after drafts[:j]),
    asked only for the positions reached; uniforms[j]: that position's draw (at
    least len(drafts) + 1 of them). The tokens emitted, drafts[:n] + [next], are the
    ones sampling target position by position with `uniforms` would emit.
    """
    for j, token in enumerate(drafts):
        chosen = sample(target(j), uniforms[j])
        if chosen != token:
            return j, chosen
    return len(drafts), sample(target(len(drafts)), uniforms[len(drafts)])
