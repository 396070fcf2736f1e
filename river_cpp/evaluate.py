"""Quality of a River configuration measured against its own backbone.

Everything is teacher-forced along one token sequence (usually the backbone's greedy
continuation), one decode step per token so each token takes its own exit, and
compared position by position with the backbone's logits: KL divergence, same top-1,
and greedy tokens-until-divergence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from river_cpp.model import RiverModel
from river_cpp.policy import ExitPolicy


@dataclass
class ForcedRun:
    """Logits of each continuation position and the exit depth that produced them."""

    logits: np.ndarray        # [n, n_vocab]: row i predicts continuation[i]
    exit_layers: np.ndarray   # [n]


def teacher_forced(model: RiverModel, prompt: Sequence[int], continuation: Sequence[int], *,
                   before_step: Optional[Callable[[int], None]] = None) -> ForcedRun:
    """Prefill `prompt`, then feed `continuation` one token at a time.

    Row i of the result is the distribution over continuation[i]. `before_step(i)`
    runs before the forward that produces row i (for per-token policies).
    """
    model.reset()
    rows, exits = [], []
    if before_step:
        before_step(0)
    rows.append(model.forward(prompt, last_only=True)[0])
    exits.append(int(model.last_exit_layers[-1]))
    for i, token in enumerate(continuation[:-1], start=1):
        if before_step:
            before_step(i)
        rows.append(model.forward([token], last_only=True)[0])
        exits.append(int(model.last_exit_layers[0]))
    return ForcedRun(np.stack(rows), np.asarray(exits))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def kl_divergence(reference_logits: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """KL(reference || other) per row, in nats."""
    p_log = log_softmax(reference_logits.astype(np.float64))
    q_log = log_softmax(logits.astype(np.float64))
    return (np.exp(p_log) * (p_log - q_log)).sum(axis=-1)


@dataclass(frozen=True)
class QualityReport:
    """Per-position comparison with the backbone, pooled over all prompts."""

    n_positions: int
    mean_kl: float
    median_kl: float
    p99_kl: float
    max_kl: float
    same_top1: float

    @classmethod
    def compare(cls, reference_logits: np.ndarray, logits: np.ndarray) -> "QualityReport":
        kl = kl_divergence(reference_logits, logits)
        same = reference_logits.argmax(-1) == logits.argmax(-1)
        return cls(int(kl.size), float(kl.mean()), float(np.median(kl)), float(np.percentile(kl, 99)),
                   float(kl.max()), float(same.mean()))


def greedy_tokens(model: RiverModel, prompt: Sequence[int], n_tokens: int) -> list[int]:
    """The greedy continuation under the model's current policy (no stop tokens)."""
    model.reset()
    logits = model.forward(prompt, last_only=True)[0]
    out: list[int] = []
    while len(out) < n_tokens:
        out.append(int(logits.argmax()))
        if len(out) < n_tokens:
            logits = model.forward([out[-1]], last_only=True)[0]
    return out


def tokens_until_divergence(reference: Sequence[int], other: Sequence[int]) -> int:
    """Length of the common prefix of two greedy continuations."""
    n = 0
    for a, b in zip(reference, other):
        if a != b:
            break
        n += 1
    return n


def backbone_reference(model: RiverModel, prompt: Sequence[int], n_tokens: int) -> tuple[list[int], ForcedRun]:
    """The backbone's greedy continuation of `prompt` and its own forced logits."""
    policy = model.policy
    model.policy = ExitPolicy.never()
    try:
        continuation = greedy_tokens(model, prompt, n_tokens)
        return continuation, teacher_forced(model, prompt, continuation)
    finally:
        model.policy = policy
