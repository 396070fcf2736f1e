"""Sampling: one step's logits and the token history -> the next token id.

Owns the choice of a token, in llama.cpp's order (repeat penalty, top-k, top-p,
min-p, temperature, draw); it knows nothing of models, text or when to stop.
Each stage is a plain function on candidates, composed by Sampler (mlx-lm style).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
from collections import deque
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from river_cpp.decoding.acceptance import sample

# The tokens still in the running, as (token ids, their logits); the stages below
# keep ids and logits aligned and never look at the vocabulary as a whole again.
Candidates = tuple[np.ndarray, np.ndarray]

# top_p looks at this many of the most likely tokens first and, until they hold
# enough probability, at _TOP_P_GROWTH times as many: no sort of the whole vocabulary
# when the distribution is peaked, few passes over it when it is not.
_TOP_P_FIRST_LOOK = 64
_TOP_P_GROWTH = 8


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each token.

    temperature 0 means greedy (argmax after the repeat penalty). top_k 0, top_p 1,
    min_p 0, repeat_penalty 1 and repeat_last_n 0 each switch their stage off.
    seed None draws from fresh OS entropy. stop: strings that end the generation
    (the text includes none of them; a single string is one stop string).
    One SamplingParams travels from the CLI, the server and the API to the sampler.
    """

    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    seed: Optional[int] = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        for s in stop:
            if not isinstance(s, str) or not s:
                raise ValueError(f"stop strings must be non-empty strings, got {s!r}")
        object.__setattr__(self, "stop", stop)
        _check_real("temperature", self.temperature, low=0.0)
        _check_int("top_k", self.top_k, low=0)
        _check_real("top_p", self.top_p, low=0.0, high=1.0)
        _check_real("min_p", self.min_p, low=0.0, high=1.0)
        _check_real("repeat_penalty", self.repeat_penalty, low=0.0, low_inclusive=False)
        _check_int("repeat_last_n", self.repeat_last_n, low=0)
        if self.seed is not None:
            _check_int("seed", self.seed, low=0)

    @classmethod
    def of(cls, sampling: Optional[SamplingParams] = None, **options: Any) -> SamplingParams:
        """`sampling` (default: SamplingParams()) with the named `options` replaced;
        TypeError naming an option that is not a sampling setting."""
        base = sampling if sampling is not None else cls()
        if not isinstance(base, SamplingParams):
            raise TypeError(f"sampling must be a SamplingParams, got {type(base).__name__}")
        unknown = set(options) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise TypeError(f"unknown option(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(base, **options) if options else base

    def replace(self, **options: Any) -> SamplingParams:
        """A copy with `options` replaced."""
        return dataclasses.replace(self, **options)


def _check_real(name: str, value: object, *, low: float, high: float = math.inf, low_inclusive: bool = True) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    too_low = value < low if low_inclusive else value <= low
    if too_low or value > high or math.isinf(value):
        lower = "[" if low_inclusive else "("
        upper = f"{high}]" if math.isfinite(high) else "inf)"
        raise ValueError(f"{name} must be in {lower}{low}, {upper}, got {value!r}")


def _check_int(name: str, value: object, *, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value!r}")


# ---------------------------------------------------------------- stages


def apply_repeat_penalty(logits: np.ndarray, history: Sequence[int], penalty: float, last_n: int) -> np.ndarray:
    """Penalize tokens seen in the last `last_n` of `history` (a new array).

    llama.cpp's rule: a positive logit is divided by `penalty`, a negative (or
    zero) one multiplied, so a penalty > 1 always makes the token less likely.
    """
    if penalty == 1.0 or last_n == 0 or len(history) == 0:
        return logits
    recent = np.unique(np.asarray(history[-last_n:], dtype=np.int64))
    penalized = logits.copy()
    seen = penalized[recent]
    penalized[recent] = np.where(seen > 0, seen / penalty, seen * penalty)
    return penalized


def top_k(candidates: Candidates, k: int) -> Candidates:
    """Keep the `k` most likely candidates, most likely first (k 0: keep all)."""
    ids, logits = candidates
    if k == 0 or k >= ids.size:
        return candidates
    keep = _indices_of_largest(logits, k)
    return ids[keep], logits[keep]


def top_p(candidates: Candidates, p: float) -> Candidates:
    """Keep the most likely candidates whose probabilities first sum to at least `p`.

    The token that crosses `p` is kept, and so is always the most likely one.
    """
    ids, logits = candidates
    if p >= 1.0:
        return candidates
    probs = _softmax(logits)
    n_looked_at = min(_TOP_P_FIRST_LOOK, ids.size)
    while True:
        best = _indices_of_largest(probs, n_looked_at)
        cumulative = np.cumsum(probs[best])
        if cumulative[-1] >= p or n_looked_at == ids.size:
            n_kept = min(int(np.searchsorted(cumulative, p)) + 1, n_looked_at)
            keep = best[:n_kept]
            return ids[keep], logits[keep]
        n_looked_at = min(_TOP_P_GROWTH * n_looked_at, ids.size)


def min_p(candidates: Candidates, p: float) -> Candidates:
    """Keep candidates at least `p` times as likely as the most likely one (p 0: all)."""
    ids, logits = candidates
    if p <= 0.0:
        return candidates
    # prob_i >= p * prob_max  <=>  logit_i >= logit_max + log(p): no softmax needed.
    keep = logits >= logits.max() + math.log(p)
    return ids[keep], logits[keep]


def _indices_of_largest(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the `k` largest values, largest first, in O(n + k log k)."""
    if k < values.size:
        part = np.argpartition(values, values.size - k)[values.size - k :]
    else:
        part = np.arange(values.size)
    return part[np.argsort(-values[part], kind="stable")]


def _softmax(logits: np.ndarray) -> np.ndarray:
    # float64 so that the probabilities sum to 1 within rng.choice's tolerance.
    shifted = np.exp(logits.astype(np.float64) - logits.max())
    return shifted / shifted.sum()


# ---------------------------------------------------------------- sampler


class Sampler:
    """Callable that picks the next token: sampler(logits, history) -> id.

    Owns its random generator, seeded from params.seed, so two samplers with the
    same params and seed draw the same tokens from the same logits. Each token takes
    exactly one uniform draw of that generator (river_cpp.decoding.acceptance.sample), so a
    speculative loop can look the draws of the next positions up (peek) and emit
    the very tokens a plain loop would.
    """

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self._rng = np.random.default_rng(params.seed)
        self._ahead: deque[float] = deque()  # draws peeked, not yet used

    def __call__(self, logits: np.ndarray, history: Sequence[int]) -> int:
        """Pick the next token from one position's logits ([n_vocab])."""
        return self.draw(self.distribution(logits, history))

    def distribution(self, logits: np.ndarray, history: Sequence[int]) -> Candidates:
        """The distribution this sampler draws from: (token ids, their probabilities).

        Greedy (temperature 0) is all mass on the argmax. Speculative decoding
        compares drafted tokens with the target's samples from this.
        """
        logits = np.asarray(logits, dtype=np.float32)
        if logits.ndim != 1 or logits.size == 0:
            raise ValueError(f"logits must be a non-empty 1-D array, got shape {logits.shape}")
        params = self.params
        logits = apply_repeat_penalty(logits, history, params.repeat_penalty, params.repeat_last_n)
        if params.temperature == 0.0:
            return np.array([int(np.argmax(logits))]), np.ones(1)
        candidates = (np.arange(logits.size), logits)
        candidates = top_k(candidates, params.top_k)
        candidates = top_p(candidates, params.top_p)
        ids, kept = min_p(candidates, params.min_p)
        return ids, _softmax(kept / params.temperature)

    def draw(self, dist: Candidates) -> int:
        """The next token from `dist`, with the next uniform draw."""
        return sample(dist, self.next_uniform())

    def peek(self, n: int) -> list[float]:
        """The uniform draws of the next n tokens, without using them."""
        while len(self._ahead) < n:
            self._ahead.append(float(self._rng.random()))
        return list(itertools.islice(self._ahead, n))

    def next_uniform(self) -> float:
        """The next token's uniform draw in [0, 1) (one a peek returned first, if any)."""
        return self._ahead.popleft() if self._ahead else float(self._rng.random())

    def skip(self, n: int) -> None:
        """Use the next n draws (tokens a speculative round emitted)."""
        for _ in range(n):
            self.next_uniform()
