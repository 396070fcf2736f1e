"""Quality of a River configuration measured against its own backbone.

Everything is teacher-forced along one token sequence (corpus text, or the backbone's
greedy continuation), one decode step per token so each token takes its own exit,
and compared position by position with the backbone's logits: KL divergence and its
tail, same top-1, the change in the probability of the backbone's top token; plus
greedy tokens-until-divergence.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable, Optional, Sequence, Union

import numpy as np

from river_cpp.decoding.generation import generate_step
from river_cpp.engine.compute.backbone import Backbone, common_prefix
from river_cpp.engine.compute.policy import ExitPolicy

# An exit policy for a whole run, or policy(i) for the forward whose logits give row
# (or token) i, 0 being the prompt's (generate_step's `policy`); None: the model's.
PolicyOption = Union[ExitPolicy, Callable[[int], ExitPolicy], None]

if TYPE_CHECKING:
    from river_cpp.decoding.speculative import Speculative
    from river_cpp.model import RiverModel


# ---------------------------------------------------------------- samplers


class ForcedTokens:
    """A sampler that chooses `tokens` in order whatever the logits: teacher forcing.

    Past the end it chooses the last token again; a caller that stops after
    len(tokens) steps never feeds that choice. `after(i)`, when given, runs once the
    i-th choice is made, before the forward that feeds it (to observe each step).
    """

    def __init__(self, tokens: Sequence[int], *, after: Optional[Callable[[int], None]] = None) -> None:
        if not len(tokens):
            raise ValueError("nothing to force: no tokens")
        self.tokens = [int(t) for t in tokens]
        self.after = after
        self.n_chosen = 0

    def __call__(self, logits: np.ndarray, history: Sequence[int]) -> int:
        i = self.n_chosen
        self.n_chosen += 1
        if self.after is not None:
            self.after(i)
        return self.tokens[min(i, len(self.tokens) - 1)]


def greedy(logits: np.ndarray, history: Sequence[int]) -> int:
    """The greedy sampler: the most likely token (no penalties)."""
    return int(np.argmax(logits))


def _then(sampler: Callable[[np.ndarray, Sequence[int]], int], after: Optional[Callable[[int], None]]):
    """`sampler`, followed by after(i) once the i-th token is chosen."""
    if after is None:
        return sampler
    count = itertools.count()

    def sample(logits: np.ndarray, history: Sequence[int]) -> int:
        token = sampler(logits, history)
        after(next(count))
        return token

    return sample


# ---------------------------------------------------------------- runs


@dataclass
class ForcedRun:
    """Logits of each continuation position and the exit depth that produced them."""

    logits: np.ndarray  # [n, n_vocab]: row i predicts continuation[i]
    exit_layers: np.ndarray  # [n]


def teacher_forced(
    model: Backbone,
    prompt: Sequence[int],
    continuation: Sequence[int],
    *,
    before_step: Optional[Callable[[int], None]] = None,
    batched: bool = False,
    policy: PolicyOption = None,
) -> ForcedRun:
    """From an empty cache, prefill `prompt`, then feed `continuation` one token at a
    time (generation's loop, choosing the continuation's tokens).

    Row i of the result is the distribution over continuation[i]. `before_step(i)`
    runs before the forward that produces row i (to observe each step).
    batched: one forward of prompt + continuation[:-1] instead, for a model whose
    tokens take no per-token decisions (llama.cpp: the same logits, much faster).
    policy: the exit policy of the run, or of each row (PolicyOption; None: the model's).
    """
    model.reset()
    if batched:
        if before_step is not None or callable(policy):
            raise ValueError("a batched run takes no per-token steps or policies")
        logits = model.forward(list(prompt) + list(continuation[:-1]), route="backbone")[len(prompt) - 1 :]
        return ForcedRun(np.array(logits, dtype=np.float32), np.asarray(model.last_exit_layers[len(prompt) - 1 :]))
    if before_step is not None:
        before_step(0)
    after = None if before_step is None else (lambda i: before_step(i + 1) if i + 1 < len(continuation) else None)
    rows, exits = [], []
    for step in itertools.islice(
        generate_step(model, prompt, ForcedTokens(continuation, after=after), policy=policy), len(continuation)
    ):
        rows.append(step.logits.copy())
        exits.append(step.exit_layer)
    return ForcedRun(np.stack(rows), np.asarray(exits))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def kl_divergence(reference_logits: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """KL(reference || other) per row, in nats."""
    return _kl(log_softmax(reference_logits.astype(np.float64)), log_softmax(logits.astype(np.float64)))


def _kl(p_log: np.ndarray, q_log: np.ndarray) -> np.ndarray:
    return (np.exp(p_log) * (p_log - q_log)).sum(axis=-1)


@dataclass(frozen=True)
class Positions:
    """Per-position comparison with the reference: what QualityReport summarizes."""

    kl: np.ndarray  # KL(reference || other), nats
    same_top1: np.ndarray  # bool: both put the most probability on the same token
    abs_dp: np.ndarray  # |p_ref(t) - p_other(t)| of the reference's top token t

    @classmethod
    def compare(cls, reference_logits: np.ndarray, logits: np.ndarray) -> Positions:
        """Row by row comparison of two [n, n_vocab] logit arrays."""
        if reference_logits.shape != logits.shape:
            raise ValueError(f"logit shapes differ: {reference_logits.shape} and {logits.shape}")
        p_log = log_softmax(reference_logits.astype(np.float64))
        q_log = log_softmax(logits.astype(np.float64))
        kl = _kl(p_log, q_log)
        top = p_log.argmax(-1)
        rows = np.arange(top.size)
        abs_dp = np.abs(np.exp(p_log[rows, top]) - np.exp(q_log[rows, top]))
        return cls(kl, top == q_log.argmax(-1), abs_dp)

    @classmethod
    def concatenate(cls, parts: Sequence[Positions]) -> Positions:
        """One record of several runs' positions, in order."""
        if not parts:
            return cls(np.zeros(0), np.zeros(0, dtype=bool), np.zeros(0))
        return cls(*(np.concatenate([getattr(p, name) for p in parts]) for name in ("kl", "same_top1", "abs_dp")))


# Percentiles of the KL divergence reported, highest first (llama-perplexity's choice of tails).
KL_PERCENTILES = (99.9, 99.0, 95.0, 90.0, 50.0)


@dataclass(frozen=True)
class QualityReport:
    """Quality against the reference (the backbone), pooled over all positions.

    Means carry their standard error (positions taken as independent, which they
    are not quite within one text: read it as a lower bound).
    """

    n_positions: int
    mean_kl: float
    mean_kl_se: float
    max_kl: float
    kl_percentiles: dict[float, float]  # KL_PERCENTILES -> value
    same_top1: float
    same_top1_se: float
    mean_abs_dp: float
    mean_abs_dp_se: float

    @classmethod
    def compare(cls, reference_logits: np.ndarray, logits: np.ndarray) -> QualityReport:
        """The report of two [n, n_vocab] logit arrays."""
        return cls.from_positions(Positions.compare(reference_logits, logits))

    @classmethod
    def from_positions(cls, positions: Positions) -> QualityReport:
        n = int(positions.kl.size)
        if n == 0:
            raise ValueError("no positions to report on")
        same = positions.same_top1.astype(np.float64)
        return cls(
            n,
            float(positions.kl.mean()),
            standard_error(positions.kl),
            float(positions.kl.max()),
            {q: float(v) for q, v in zip(KL_PERCENTILES, np.percentile(positions.kl, KL_PERCENTILES))},
            float(same.mean()),
            standard_error(same),
            float(positions.abs_dp.mean()),
            standard_error(positions.abs_dp),
        )

    @property
    def median_kl(self) -> float:
        return self.kl_percentiles[50.0]

    @property
    def p99_kl(self) -> float:
        return self.kl_percentiles[99.0]

    def block(self, title: str) -> str:
        """The statistics as a text block, laid out like llama-perplexity's KL divergence report."""
        lines = [
            f"====== KL divergence statistics: {title} ({self.n_positions} positions) ======",
            f"Mean    KLD: {self.mean_kl:10.6f} ± {self.mean_kl_se:9.6f}",
            f"Maximum KLD: {self.max_kl:10.6f}",
        ]
        for q in KL_PERCENTILES:
            label = "Median " if q == 50.0 else f"{q:5.1f}%".rjust(7)
            lines.append(f"{label} KLD: {self.kl_percentiles[q]:10.6f}")
        lines += [
            f"Mean  |Δp| : {100 * self.mean_abs_dp:9.4f}% ± {100 * self.mean_abs_dp_se:.4f}%",
            f"Same top-1 : {100 * self.same_top1:9.4f}% ± {100 * self.same_top1_se:.4f}%",
        ]
        return "\n".join(lines)

    def to_json(self) -> dict:
        """Plain JSON values (percentile keys as text, e.g. "99.9")."""
        record = asdict(self)
        record["kl_percentiles"] = {f"{q:g}": v for q, v in self.kl_percentiles.items()}
        return record


def standard_error(values: np.ndarray) -> float:
    """Standard error of the mean of `values` (0 for a single value), positions taken as independent."""
    n = values.size
    return float(values.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0


def greedy_tokens(
    model: Backbone,
    prompt: Sequence[int],
    n_tokens: int,
    *,
    before_step: Optional[Callable[[int], None]] = None,
    speculative: Optional[Speculative] = None,
    policy: PolicyOption = None,
) -> list[int]:
    """The greedy continuation under `policy` (a PolicyOption; None: the model's; no
    stop tokens), from an empty cache.

    `before_step(i)` runs before the forward whose logits choose token i, as in
    teacher_forced. speculative: generate it losslessly (the backbone's tokens).
    """
    model.reset()
    if before_step is not None:
        before_step(0)
    after = None if before_step is None else (lambda i: before_step(i + 1) if i + 1 < n_tokens else None)
    steps = generate_step(model, prompt, _then(greedy, after), policy=policy, speculative=speculative)
    tokens = [step.token for step in itertools.islice(steps, n_tokens)]
    steps.close()
    return tokens


def tokens_until_divergence(reference: Sequence[int], other: Sequence[int]) -> int:
    """Length of the common prefix of two greedy continuations."""
    return common_prefix(reference, other)


def backbone_reference(model: RiverModel, prompt: Sequence[int], n_tokens: int) -> tuple[list[int], ForcedRun]:
    """The backbone's greedy continuation of `prompt` and its own forced logits."""
    never = ExitPolicy.never()
    continuation = greedy_tokens(model, prompt, n_tokens, policy=never)
    return continuation, teacher_forced(model, prompt, continuation, policy=never)
