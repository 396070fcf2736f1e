"""Choosing exit thresholds from data: what `river-cpp calibrate` runs.

The paper leaves the threshold to manual tuning. Here a target (a same-top-1 rate
to keep, or a mean KL divergence not to exceed) is met at the least backbone depth
on a calibration corpus, teacher-forced one token at a time like `river-cpp eval`:

1. uniform: one tau for every depth, found by bisection (a higher tau exits later,
   so quality rises with it);
2. per-layer: each depth's threshold is the q-quantile of the signal the backbone
   shows there on the calibration corpus, so every depth lets out about the same
   share of the tokens that reach it, whatever the scale of its own signal; q is
   found by bisection.

The family that meets the target at the smaller mean exit depth wins. Its quality
is then measured on held-out text: the figure to trust, not the calibration one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from river_cpp.decoding.presets import PAPER
from river_cpp.engine.compute.policy import NEVER, ExitPolicy
from river_cpp.measure.comparison import Progress, Workload, forced_positions, reference_run
from river_cpp.measure.corpus import Document, TextTokenizer, split_corpus, token_chunks
from river_cpp.measure.evaluate import QualityReport, teacher_forced
from river_cpp.model import RiverModel

UNIFORM, PER_LAYER = "uniform", "per-layer"
# A signal cannot exceed 1 (cosine, 1 - relative update), so a threshold above it never exits.
_NEVER_EXITS = 2.0


def _no_progress(items: Sequence, desc: str) -> Sequence:
    return items


@dataclass(frozen=True)
class Target:
    """The quality a policy must keep against the backbone."""

    top1: Optional[float] = None  # same-top-1 rate at least this
    max_kld: Optional[float] = None  # mean KL divergence at most this

    def __post_init__(self) -> None:
        if (self.top1 is None) == (self.max_kld is None):
            raise ValueError("give exactly one target: a same-top-1 rate or a maximum mean KLD")
        if self.top1 is not None and not 0.0 < self.top1 <= 1.0:
            raise ValueError(f"the same-top-1 target must be in (0, 1], got {self.top1!r}")
        if self.max_kld is not None and not (self.max_kld >= 0.0 and math.isfinite(self.max_kld)):
            raise ValueError(f"the KLD target must be a non-negative number, got {self.max_kld!r}")

    def met(self, report: QualityReport) -> bool:
        if self.top1 is not None:
            return report.same_top1 >= self.top1
        return report.mean_kl <= self.max_kld

    def __str__(self) -> str:
        return f"same top-1 >= {self.top1:g}" if self.top1 is not None else f"mean KLD <= {self.max_kld:g}"


@dataclass(frozen=True)
class Trial:
    """One candidate policy measured on the calibration corpus."""

    family: str  # UNIFORM or PER_LAYER
    parameter: float  # tau, or the quantile q
    policy: ExitPolicy
    report: QualityReport
    mean_exit: float


@dataclass
class Calibration:
    target: Target
    chosen: Trial
    trials: list[Trial] = field(default_factory=list)
    held_out: Optional[QualityReport] = None
    held_out_mean_exit: float = math.nan

    @property
    def policy(self) -> ExitPolicy:
        """The chosen policy: the one that meets the target at the least mean exit depth."""
        return self.chosen.policy


def split_workloads(
    tokenizer: TextTokenizer, documents: Sequence[Document], *, tokens: int, prefix: int = 32, forced: int = 64
) -> tuple[Workload, Workload]:
    """Calibration and held-out workloads of about `tokens` decode positions each,
    from a deterministic split of the corpus by document."""
    if min(tokens, prefix, forced) < 1:
        raise ValueError("tokens, prefix and forced must be positive integers")
    n_chunks = -(-tokens // forced)
    works = []
    for half, documents_part in zip(("calibration", "held-out"), split_corpus(documents)):
        chunks = token_chunks(tokenizer, documents_part, length=prefix + forced + 1, n_chunks=n_chunks)
        if not chunks:
            raise ValueError(
                f"the {half} half of the corpus (split by document) is shorter than one "
                f"{prefix + forced + 1}-token chunk: give more or longer documents"
            )
        works.append(Workload(chunks, prefix, [], 1))
    return works[0], works[1]


def signal_quantile_policy(signals: np.ndarray, q: float, *, min_layer: int, signal: str) -> ExitPolicy:
    """Per-depth thresholds at the q-quantile of each depth's signal ([positions, n_layer],
    NaN where unchecked); depths below min_layer never exit."""
    n_layer = signals.shape[1]
    thresholds = []
    for d in range(n_layer):
        column = signals[:, d]
        column = column[np.isfinite(column)]
        thresholds.append(float(np.quantile(column, q)) if d >= min_layer and column.size else NEVER)
    return ExitPolicy(tuple(thresholds), signal=signal)


def backbone_signals(
    model: RiverModel, work: Workload, *, signal: str, progress: Progress = _no_progress
) -> np.ndarray:
    """The signal at every depth of every decode step of the corpus, with no token
    exiting: [positions, n_layer], NaN at depth 0."""
    checked = ExitPolicy.uniform(_NEVER_EXITS, min_layer=1, signal=signal)
    rows = []

    def record(i: int) -> None:
        # before the forward of row i: row i - 1's came from decode step i - 1 (row 0: the prefill)
        if i > 1:
            rows.append(np.array(model.engine.last_similarities, dtype=np.float64))

    for chunk in progress(work.chunks, "signals"):
        teacher_forced(model, chunk[: work.prefix], chunk[work.prefix :], before_step=record, policy=checked)
        rows.append(np.array(model.engine.last_similarities, dtype=np.float64))  # the last decode step
    return np.stack(rows)


def bisect(measure: Callable[[float], Trial], target: Target, low: float, high: float, steps: int) -> list[Trial]:
    """Trials of a parameter whose quality rises with it, narrowing to the smallest
    one that meets the target. `high` (no exits: the backbone) is measured only when
    no other trial meets the target, so that one always does."""
    trials = [measure(low)]
    if target.met(trials[0].report):
        return trials
    for _ in range(steps):
        middle = (low + high) / 2
        trials.append(measure(middle))
        if target.met(trials[-1].report):
            high = middle
        else:
            low = middle
    if not any(target.met(t.report) for t in trials):
        trials.append(measure(high))
    return trials


def calibrate(
    model: RiverModel,
    calibration: Workload,
    target: Target,
    *,
    held_out: Optional[Workload] = None,
    signal: str = "cosine",
    min_layer: int = PAPER.min_layer,
    steps: int = 7,
    families: Sequence[str] = (UNIFORM, PER_LAYER),
    progress: Progress = _no_progress,
) -> Calibration:
    """Thresholds that meet `target` on `calibration` at the least mean exit depth.

    `model` is loaded with its river; every run passes its own policy, so the model
    is left as it was: the choice is the result's `policy`. With `held_out`, the
    chosen policy's quality there is measured too.
    """
    unknown = set(families) - {UNIFORM, PER_LAYER}
    if unknown or not families:
        raise ValueError(f"families must be a non-empty subset of {(UNIFORM, PER_LAYER)}, got {families!r}")
    reference, _ = reference_run(model, calibration, progress)

    def measure(family: str, parameter: float, policy: ExitPolicy) -> Trial:
        positions, exits = forced_positions(
            model,
            calibration,
            reference,
            policy_for=lambda c: policy,
            progress=progress,
            desc=f"{family} {parameter:.5f}",
        )
        return Trial(family, parameter, policy, QualityReport.from_positions(positions), float(exits.mean()))

    trials: list[Trial] = []
    if UNIFORM in families:
        trials += bisect(
            lambda tau: measure(UNIFORM, tau, ExitPolicy.uniform(tau, min_layer=min_layer, signal=signal)),
            target,
            0.9,
            1.0,
            steps,
        )
    if PER_LAYER in families:
        signals = backbone_signals(model, calibration, signal=signal, progress=progress)
        trials += bisect(
            lambda q: measure(PER_LAYER, q, signal_quantile_policy(signals, q, min_layer=min_layer, signal=signal)),
            target,
            0.0,
            1.0,
            steps,
        )
    chosen = min((t for t in trials if target.met(t.report)), key=lambda t: t.mean_exit)
    result = Calibration(target, chosen, trials)
    if held_out is not None:
        held_reference, _ = reference_run(model, held_out, progress)
        positions, exits = forced_positions(
            model, held_out, held_reference, policy_for=lambda c: chosen.policy, progress=progress, desc="held out"
        )
        result.held_out = QualityReport.from_positions(positions)
        result.held_out_mean_exit = float(exits.mean())
    return result
