"""Sampling: one step's logits and the token history -> the next token id.

Owns the choice of a token, in llama.cpp's order (as llama-cpp-python chains it:
logit bias, penalties (repeat, frequency, presence), a constraint such as a grammar,
top-k, typical, top-p, min-p, temperature, draw); it knows nothing of models, text
or when to stop. Each stage is a plain function on candidates, composed by Sampler
(mlx-lm style).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
from collections import deque
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Protocol, Sequence, Union

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
# A constraint is asked about the most likely tokens first, this many, then
# _TOP_P_GROWTH times as many, until enough of them are legal: a grammar's check
# costs per token, and the model's favourite is legal most of the time.
_CONSTRAINED_FIRST_LOOK = 16


class TokenConstraint(Protocol):
    """What may come next (river_cpp.decoding.grammar.GrammarState is one)."""

    def allowed(self, ids: np.ndarray) -> np.ndarray:
        """A boolean per id of `ids`: whether that token is legal next."""
        ...


class NoLegalToken(Exception):
    """The constraint allows no token at this position (a grammar's dead end)."""


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each token.

    temperature 0 means greedy (argmax after logit bias and penalties). top_k 0,
    top_p 1, min_p 0, typical_p 1, repeat_penalty 1, frequency_penalty 0,
    presence_penalty 0 and repeat_last_n 0 each switch their stage off. The penalties
    look at the last repeat_last_n tokens of the history (llama.cpp's rule: a token
    seen c times there has its logit divided (positive) or multiplied (negative) by
    repeat_penalty, then lowered by c * frequency_penalty + presence_penalty);
    penalize_prompt False counts only generated tokens (llama-cpp-python's Llama).
    logit_bias: (token id, bias) pairs added to the logits first (a Mapping is
    accepted; -inf bans a token). seed None draws from fresh OS entropy. stop:
    strings that end the generation (the text includes none of them; a single string
    is one stop string). One SamplingParams travels from the CLI, the server and the
    API to the sampler.
    """

    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    seed: Optional[int] = None
    stop: tuple[str, ...] = ()
    typical_p: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    penalize_prompt: bool = True

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
        _check_real("typical_p", self.typical_p, low=0.0, high=1.0)
        _check_real("repeat_penalty", self.repeat_penalty, low=0.0, low_inclusive=False)
        _check_real("frequency_penalty", self.frequency_penalty, low=-math.inf)
        _check_real("presence_penalty", self.presence_penalty, low=-math.inf)
        _check_int("repeat_last_n", self.repeat_last_n, low=0)
        if not isinstance(self.penalize_prompt, bool):
            raise ValueError(f"penalize_prompt must be a boolean, got {self.penalize_prompt!r}")
        if self.seed is not None:
            _check_int("seed", self.seed, low=0)
        object.__setattr__(self, "logit_bias", _logit_bias_pairs(self.logit_bias))

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
        lower = "[" if low_inclusive and math.isfinite(low) else "("
        upper = f"{high}]" if math.isfinite(high) else "inf)"
        raise ValueError(f"{name} must be in {lower}{low}, {upper}, got {value!r}")


def _logit_bias_pairs(
    bias: Union[Mapping[int, float], Sequence[tuple[int, float]], None],
) -> tuple[tuple[int, float], ...]:
    """logit_bias as sorted (token id, bias) pairs; ValueError naming a bad entry. The
    ids are checked against the vocabulary where it is known (Sampler.check_vocab)."""
    items = bias.items() if isinstance(bias, Mapping) else (bias or ())
    pairs = {}
    for entry in items:
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            raise ValueError(f"logit_bias entries must be (token id, bias) pairs, got {entry!r}")
        token, value = entry
        if isinstance(token, bool) or not isinstance(token, numbers.Integral) or token < 0:
            raise ValueError(f"logit_bias token ids must be non-negative integers, got {token!r}")
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value) or value == math.inf:
            raise ValueError(f"logit_bias of token {token} must be a number (or -inf), got {value!r}")
        pairs[int(token)] = float(value)
    return tuple(sorted(pairs.items()))


def _check_int(name: str, value: object, *, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value!r}")


# ---------------------------------------------------------------- stages


def apply_logit_bias(logits: np.ndarray, bias: Sequence[tuple[int, float]]) -> np.ndarray:
    """`logits` with each (token, bias) added (a new array when there is any)."""
    if not bias:
        return logits
    biased = logits.copy()
    ids = np.fromiter((t for t, _ in bias), dtype=np.int64, count=len(bias))
    biased[ids] += np.fromiter((b for _, b in bias), dtype=np.float32, count=len(bias))
    return biased


def apply_penalties(
    logits: np.ndarray, recent: Sequence[int], repeat: float, frequency: float = 0.0, presence: float = 0.0
) -> np.ndarray:
    """Penalize the tokens of `recent` (a new array when any penalty applies).

    llama.cpp's rule: a positive logit is divided by `repeat`, a negative (or zero)
    one multiplied, so a penalty > 1 always makes the token less likely; then a
    token seen c times loses c * frequency + presence.
    """
    if (repeat == 1.0 and frequency == 0.0 and presence == 0.0) or len(recent) == 0:
        return logits
    seen, counts = np.unique(np.asarray(recent, dtype=np.int64), return_counts=True)
    penalized = logits.copy()
    values = penalized[seen]
    values = np.where(values > 0, values / repeat, values * repeat)
    penalized[seen] = values - (counts * frequency + presence)
    return penalized


def apply_repeat_penalty(logits: np.ndarray, history: Sequence[int], penalty: float, last_n: int) -> np.ndarray:
    """Penalize tokens seen in the last `last_n` of `history` (apply_penalties' repeat rule)."""
    if last_n == 0:
        return logits
    return apply_penalties(logits, history[-last_n:], penalty)


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


def typical(candidates: Candidates, p: float) -> Candidates:
    """Locally typical sampling (Meister et al. 2022): keep the candidates whose
    surprise is closest to the distribution's entropy until they hold more than `p`
    (at least one; p 1: all), as llama.cpp's typical sampler does."""
    ids, logits = candidates
    if p >= 1.0:
        return candidates
    probs = _softmax(logits)
    with np.errstate(divide="ignore"):
        surprise = -np.log(probs)
    entropy = float(np.sum(np.where(probs > 0, probs * surprise, 0.0)))
    order = np.argsort(np.abs(surprise - entropy), kind="stable")
    cumulative = np.cumsum(probs[order])
    n_kept = min(int(np.searchsorted(cumulative, p, side="right")) + 1, ids.size)
    keep = order[:n_kept]
    return ids[keep], logits[keep]


def legal_best(logits: np.ndarray, constraint: TokenConstraint, k: int) -> Candidates:
    """The `k` most likely tokens `constraint` allows, most likely first (k 0: all of
    them): what top-k keeps after a mask of every illegal token, without asking the
    constraint about the whole vocabulary when the best tokens are legal."""
    n = logits.size
    looked_at = min(_CONSTRAINED_FIRST_LOOK, n)
    while True:
        best = _indices_of_largest(logits, looked_at) if k else np.arange(n)
        if not k:
            looked_at = n
        legal = best[constraint.allowed(best)]
        if (k and legal.size >= k) or looked_at == n:
            legal = legal[:k] if k else legal[np.argsort(-logits[legal], kind="stable")]
            return legal, logits[legal]
        looked_at = min(_TOP_P_GROWTH * looked_at, n)


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

    def __init__(self, params: SamplingParams, n_prompt: int = 0) -> None:
        """`n_prompt`: how many leading tokens of every history are the prompt (the
        penalties skip them unless params.penalize_prompt)."""
        self.params = params
        self._rng = np.random.default_rng(params.seed)
        self._ahead: deque[float] = deque()  # draws peeked, not yet used
        self._penalty_start = 0 if params.penalize_prompt else n_prompt

    def check_vocab(self, n_vocab: int) -> None:
        """ValueError when logit_bias names a token outside [0, n_vocab)."""
        outside = [t for t, _ in self.params.logit_bias if t >= n_vocab]
        if outside:
            raise ValueError(f"logit_bias names token id {outside[0]}, outside the vocabulary [0, {n_vocab})")

    def __call__(self, logits: np.ndarray, history: Sequence[int], constraint: Optional[TokenConstraint] = None) -> int:
        """Pick the next token from one position's logits ([n_vocab]); NoLegalToken
        when `constraint` allows none."""
        return self.draw(self.distribution(logits, history, constraint))

    def distribution(
        self, logits: np.ndarray, history: Sequence[int], constraint: Optional[TokenConstraint] = None
    ) -> Candidates:
        """The distribution this sampler draws from: (token ids, their probabilities).

        Greedy (temperature 0) is all mass on the argmax. With a `constraint` only
        the tokens it allows are candidates (after the bias and the penalties, before
        top-k: llama.cpp's place for a grammar); NoLegalToken when it allows none.
        Speculative decoding compares drafted tokens with the target's samples from this.
        """
        logits = np.asarray(logits, dtype=np.float32)
        if logits.ndim != 1 or logits.size == 0:
            raise ValueError(f"logits must be a non-empty 1-D array, got shape {logits.shape}")
        params = self.params
        logits = apply_logit_bias(logits, params.logit_bias)
        if params.repeat_last_n:
            recent = history[max(self._penalty_start, len(history) - params.repeat_last_n) :]
            logits = apply_penalties(
                logits, recent, params.repeat_penalty, params.frequency_penalty, params.presence_penalty
            )
        greedy = params.temperature == 0.0
        if constraint is not None:
            candidates = legal_best(logits, constraint, 1 if greedy else params.top_k)
            if candidates[0].size == 0:
                raise NoLegalToken("the grammar allows no token here")
        elif greedy:
            return np.array([int(np.argmax(logits))]), np.ones(1)
        else:
            candidates = top_k((np.arange(logits.size), logits), params.top_k)
        if greedy:
            return candidates[0][:1], np.ones(1)
        candidates = typical(candidates, params.typical_p)
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
