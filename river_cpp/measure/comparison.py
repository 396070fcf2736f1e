"""What `river-cpp eval` compares with the backbone, and how each comparison is run.

Every configuration is teacher-forced along the same corpus chunks: a prefix is
prefilled, then each following token is fed in its own forward, so the measured
positions are decode steps that take their own exits. The backbone's logits along
the same tokens are the reference. River configurations of a tau sweep get two
controls at the same depths: a static split at their rounded mean exit layer, and
the same multiset of exit depths dealt to random positions (does the signal choose
well, or does only the depth mix matter?). llama.cpp's quantizations of the backbone
are run the same way through LlamaCppPeer (in one batch: they take no per-token
decisions). The plot lives in river_cpp.measure.pareto.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Sequence, Union

import numpy as np

from river_cpp.decoding.presets import FAST, PAPER
from river_cpp.engine.compute.backbone import Backbone
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.engine.files.weight_bytes import WeightBytes
from river_cpp.measure.configs import (
    RiverConfig,
    decode_on_river,
    full_river,
    peer_name,
    river_at_tau,
    with_head,
    with_last_layers,
)
from river_cpp.measure.corpus import Document, TextTokenizer, document_tokens
from river_cpp.measure.evaluate import (
    ForcedRun,
    PolicyOption,
    Positions,
    QualityReport,
    greedy_tokens,
    standard_error,
    teacher_forced,
    tokens_until_divergence,
)
from river_cpp.model import RiverModel

if TYPE_CHECKING:
    from river_cpp.decoding.speculative import Speculative

FORMAT = "river-cpp-eval/1"
# The extensions beyond the paper's River that `eval` can add (issue 5's b-e).
VARIANTS = ("update_norm", "backbone_prompt", "river_types", "head")
VARIANT_RIVER_TYPES = ("iq4_nl", FAST.river)
# The paper's river with its last MIXED_LAST layers in MIXED_TYPE: where low bits cost most.
MIXED_LAST, MIXED_TYPE = 4, FAST.river
HEAD_TYPE = FAST.river_head
_MIB = 1024 * 1024
# Row groups: what a row is, for tables and plots.
STATIC, RANDOM, VARIANT, FULL_RIVER, LLAMA = "static control", "random control", "variant", "full river", "llama.cpp"


def sweep_group(signal: str) -> str:
    """The group of a tau sweep's River rows: one per exit signal."""
    return f"river {signal}"


# ---------------------------------------------------------------- what is compared


@dataclass(frozen=True)
class Entry:
    """A configuration to measure; `controls`: also its static and random-exit controls."""

    config: RiverConfig
    group: str
    controls: bool = False


def plan(
    n_layer: int,
    *,
    taus: Sequence[float],
    signal_taus: Sequence[float] = (),
    river: str = PAPER.river,
    min_layer: int = PAPER.min_layer,
    variant_tau: float = 0.98,
    variants: Sequence[str] = VARIANTS,
) -> list[Entry]:
    """The configurations to compare, ordered so that those sharing a river are adjacent.

    taus: the paper's River (cosine signal), with controls. signal_taus: the same with
    the relative update norm as the signal (variant "update_norm"), with controls.
    variant_tau: the tau of the river-type and head variants.
    """
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise ValueError(f"unknown variants {unknown} (known: {', '.join(VARIANTS)})")
    entries = [Entry(river_at_tau(tau, river=river, min_layer=min_layer), sweep_group("cosine"), True) for tau in taus]
    if "update_norm" in variants:
        entries += [
            Entry(
                river_at_tau(tau, river=river, min_layer=min_layer, signal="update_norm"),
                sweep_group("update_norm"),
                True,
            )
            for tau in signal_taus
        ]
    if "backbone_prompt" in variants:
        entries.append(Entry(decode_on_river(river), VARIANT))
    entries.append(Entry(full_river(river), FULL_RIVER))
    at_tau = river_at_tau(variant_tau, river=river, min_layer=min_layer)
    if "river_types" in variants or "head" in variants:
        entries.append(Entry(at_tau, VARIANT))  # what the variants change (dropped below if the sweep has it)
    if "river_types" in variants:
        for river_type in (t for t in VARIANT_RIVER_TYPES if t != river):
            entries += [
                Entry(river_at_tau(variant_tau, river=river_type, min_layer=min_layer), VARIANT),
                Entry(full_river(river_type), FULL_RIVER),
            ]
        n_last = min(MIXED_LAST, n_layer)
        entries += [
            Entry(with_last_layers(at_tau, n_layer, n_last, MIXED_TYPE), VARIANT),
            Entry(with_last_layers(full_river(river), n_layer, n_last, MIXED_TYPE), FULL_RIVER),
        ]
    if "head" in variants:
        entries.append(Entry(with_head(at_tau, HEAD_TYPE), VARIANT))
        if "backbone_prompt" in variants:  # the river decode at the bytes of llama.cpp's own head
            entries.append(Entry(with_head(decode_on_river(river), HEAD_TYPE), VARIANT))
    names = [e.config.name for e in entries]
    return [e for i, e in enumerate(entries) if e.config.name not in names[:i]]  # a tau listed twice runs once


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class Row:
    """One configuration's quality against the backbone and its cost."""

    name: str
    group: str
    quality: QualityReport
    bytes_per_token: float  # mean weight bytes read per decoded token
    mean_exit_layer: Optional[float] = None  # None for llama.cpp
    tokens_until_divergence: Optional[float] = None  # None: not measured (random control)
    control_of: Optional[str] = None  # the River row a control belongs to
    # A control's KLD minus its River row's, position by position: mean and standard error
    # (paired, so much tighter than the difference of the two means' errors).
    kl_excess: Optional[float] = None
    kl_excess_se: Optional[float] = None

    def to_json(self) -> dict:
        return dict(asdict(self), quality=self.quality.to_json())

    @classmethod
    def from_json(cls, data: dict) -> Row:
        quality = dict(data["quality"])
        quality["kl_percentiles"] = {float(q): v for q, v in quality["kl_percentiles"].items()}
        return cls(**dict(data, quality=QualityReport(**quality)))


@dataclass
class Comparison:
    """Every row of one eval run and the conditions it ran under."""

    model: str
    n_layer: int
    prefix: int  # prefilled tokens of each chunk
    forced: int  # measured decode steps of each chunk
    n_chunks: int
    divergence_prompts: int
    divergence_tokens: int
    backbone_bytes_per_token: int
    rows: list[Row] = field(default_factory=list)
    corpus: list[str] = field(default_factory=list)  # the corpus's sources

    def row(self, name: str) -> Row:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"no row {name!r}")

    def table(self) -> str:
        """A markdown table, one row per configuration, with a header line of the conditions."""
        lines = [
            f"{Path(self.model).name}: {self.n_chunks} chunks x {self.forced} teacher-forced decode steps "
            f"after {self.prefix} prefilled tokens; tokens until divergence: greedy, {self.divergence_prompts} "
            f"prompts x {self.divergence_tokens} tokens; backbone {self.backbone_bytes_per_token / _MIB:.1f} "
            f"MiB of weights per token",
            "",
            "| configuration | exit layer | mean KLD | 99% KLD | same top-1 | mean abs Δp | tokens until div. "
            "| MiB / token |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in self.rows:
            q = r.quality
            exit_layer = "" if r.mean_exit_layer is None else f"{r.mean_exit_layer:.1f}/{self.n_layer}"
            until = "" if r.tokens_until_divergence is None else f"{r.tokens_until_divergence:.1f}"
            lines.append(
                f"| {r.name} | {exit_layer} | {q.mean_kl:.4f} ± {q.mean_kl_se:.4f} | {q.p99_kl:.3f} | "
                f"{100 * q.same_top1:.1f}% | {100 * q.mean_abs_dp:.2f}% | {until} | "
                f"{r.bytes_per_token / _MIB:.1f} |"
            )
        return "\n".join(lines)

    def verdicts(self) -> list[str]:
        """For each River row with controls: does its signal beat them?

        "beats" / "loses to" when the control's paired KLD excess is more than twice its
        standard error above / below 0, "ties" otherwise.
        """
        lines = []
        for control in (r for r in self.rows if r.kl_excess is not None):
            margin = 2 * (control.kl_excess_se or 0.0)
            verdict = "beats" if control.kl_excess > margin else "loses to" if control.kl_excess < -margin else "ties"
            lines.append(
                f"{control.control_of}: the signal {verdict} its {control.group} (KLD "
                f"{self.row(control.control_of).quality.mean_kl:.4f} vs {control.quality.mean_kl:.4f}, "
                f"paired difference {control.kl_excess:+.4f} ± {control.kl_excess_se:.4f})"
            )
        return lines

    def to_json(self) -> str:
        data = asdict(self)
        data["rows"] = [row.to_json() for row in self.rows]
        return json.dumps({"format": FORMAT, **data}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Comparison:
        data = json.loads(text)
        if data.pop("format", None) != FORMAT:
            raise ValueError(f"not a {FORMAT} report")
        return cls(**dict(data, rows=[Row.from_json(r) for r in data["rows"]]))

    def save(self, path: Union[str, os.PathLike]) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> Comparison:
        return cls.from_json(Path(path).read_text())


# ---------------------------------------------------------------- inputs


def divergence_prompts(
    tokenizer: TextTokenizer,
    documents: Sequence[Document],
    chunks: Sequence[Sequence[int]],
    *,
    prefix: int,
    n_prompts: int,
) -> list[list[int]]:
    """Free-running prompts: the corpus's chat prompts in the chat template (BOS first),
    or, for a corpus without chat, the prefixes of its first chunks."""
    bos = tokenizer.tokenize("", add_bos=True)
    chats = [d for d in documents if d.chat][:n_prompts]
    if chats:
        return [bos + document_tokens(tokenizer, d) for d in chats]
    return [list(chunk[:prefix]) for chunk in chunks[:n_prompts]]


@dataclass(frozen=True)
class Workload:
    """The token sequences every configuration runs."""

    chunks: list[list[int]]  # each: prefix + forced + 1 tokens
    prefix: int
    prompts: list[list[int]]  # free-running prompts for tokens-until-divergence
    divergence_tokens: int

    @property
    def forced(self) -> int:
        return len(self.chunks[0]) - self.prefix - 1

    @property
    def n_ctx(self) -> int:
        longest_prompt = max((len(p) for p in self.prompts), default=0)
        return max(len(self.chunks[0]), longest_prompt + self.divergence_tokens) + 1

    def check(self) -> None:
        if not self.chunks:
            raise ValueError("the corpus gave no chunks: it is shorter than one chunk")
        if self.prefix < 1 or self.forced < 1 or any(len(c) != len(self.chunks[0]) for c in self.chunks):
            raise ValueError("chunks must all have prefix (>= 1) + forced (>= 1) + 1 tokens")


# ---------------------------------------------------------------- running


Progress = Callable[[Sequence, str], Sequence]


def _no_progress(items: Sequence, desc: str) -> Sequence:
    return items


def forced_positions(
    model: Backbone,
    work: Workload,
    reference: Sequence[np.ndarray],
    *,
    policy_for: Callable[[int], PolicyOption] = lambda chunk: None,
    progress: Progress = _no_progress,
    desc: str = "",
) -> tuple[Positions, np.ndarray]:
    """Teacher-force every chunk; compare its decode steps with the reference's rows.

    Returns the positions and each position's exit layer. `policy_for(c)` gives chunk
    c's policy (see evaluate.teacher_forced: one for the chunk, or one per step, step
    0 being the prefix's prefill; None: the model's).
    """
    parts, exits = [], []
    for c in progress(range(len(work.chunks)), desc):
        run = _forced_chunk(model, work, c, policy_for(c))
        parts.append(Positions.compare(reference[c], run.logits))
        exits.append(run.exit_layers)
    return Positions.concatenate(parts), np.concatenate(exits)


def _forced_chunk(model: Backbone, work: Workload, c: int, policy: PolicyOption, *, batched: bool = False) -> ForcedRun:
    """Chunk c teacher-forced under `policy`; row 0 (the prefill's own prediction) dropped."""
    chunk = work.chunks[c]
    run = teacher_forced(model, chunk[: work.prefix], chunk[work.prefix :], policy=policy, batched=batched)
    run.logits, run.exit_layers = run.logits[1:], run.exit_layers[1:]
    return run


def reference_run(
    model: RiverModel, work: Workload, progress: Progress = _no_progress
) -> tuple[list[np.ndarray], list[list[int]]]:
    """The backbone's logits at every measured position, per chunk, and its greedy
    continuation of every prompt (every forward under ExitPolicy.never())."""
    never = ExitPolicy.never()
    logits = [_forced_chunk(model, work, c, never).logits for c in progress(range(len(work.chunks)), "backbone")]
    greedy = [greedy_tokens(model, p, work.divergence_tokens, policy=never) for p in work.prompts]
    return logits, greedy


def mean_divergence(
    model: Backbone,
    work: Workload,
    reference_greedy: Sequence[Sequence[int]],
    policy: PolicyOption = None,
    speculative: Optional[Speculative] = None,
) -> float:
    """Mean greedy tokens-until-divergence from the backbone over the prompts, under
    `policy` (see evaluate.greedy_tokens)."""
    return float(
        np.mean(
            [
                tokens_until_divergence(ref, greedy_tokens(model, p, len(ref), policy=policy, speculative=speculative))
                for p, ref in zip(work.prompts, reference_greedy)
            ]
        )
    )


def river_rows(
    model: RiverModel,
    entry: Entry,
    work: Workload,
    reference: Sequence[np.ndarray],
    reference_greedy: Sequence[Sequence[int]],
    weights: WeightBytes,
    *,
    seed: int = 0,
    progress: Progress = _no_progress,
    speculative: Optional[Speculative] = None,
) -> Iterator[Row]:
    """The rows of one configuration (on a model loaded with its river, tail and head),
    then, when the entry asks for them, its static and random-exit controls.
    speculative: its greedy runs (tokens until divergence) are lossless River's."""
    config = entry.config

    def per_token(exit_layers: np.ndarray) -> float:
        return float(
            weights.per_token(exit_layers, tail_layers=config.tail_layers, river_head=bool(config.river_head)).mean()
        )

    positions, exits = forced_positions(
        model, work, reference, policy_for=lambda c: config.policy, progress=progress, desc=config.name
    )
    yield Row(
        config.name,
        entry.group,
        QualityReport.from_positions(positions),
        per_token(exits),
        float(exits.mean()),
        mean_divergence(model, work, reference_greedy, config.policy, speculative),
    )
    if not entry.controls:
        return

    def prefill_then(policy_at: Callable[[int], ExitPolicy]) -> Callable[[int], ExitPolicy]:
        # The prefix prefills as the River configuration does; only decode depths differ.
        return lambda i: config.policy if i == 0 else policy_at(i)

    def excess(control: Positions) -> dict[str, float]:
        difference = control.kl - positions.kl
        return dict(kl_excess=float(difference.mean()), kl_excess_se=standard_error(difference))

    k = int(round(float(exits.mean())))
    static = prefill_then(lambda i: ExitPolicy.at_layer(k))
    static_positions, static_exits = forced_positions(
        model, work, reference, policy_for=lambda c: static, progress=progress, desc=f"static k={k}"
    )
    yield Row(
        f"{config.name}: static k={k}",
        STATIC,
        QualityReport.from_positions(static_positions),
        per_token(static_exits),
        float(static_exits.mean()),
        mean_divergence(model, work, reference_greedy, static, speculative),
        control_of=config.name,
        **excess(static_positions),
    )

    dealt = np.random.default_rng(seed).permutation(exits).reshape(len(work.chunks), work.forced)
    random_positions, random_exits = forced_positions(
        model,
        work,
        reference,
        progress=progress,
        desc="random depths",
        policy_for=lambda c: prefill_then(lambda i: ExitPolicy.at_layer(int(dealt[c, i - 1]))),
    )
    # Greedy runs have no fixed positions to deal depths to: that control is left out.
    yield Row(
        f"{config.name}: random depths",
        RANDOM,
        QualityReport.from_positions(random_positions),
        per_token(random_exits),
        float(random_exits.mean()),
        control_of=config.name,
        **excess(random_positions),
    )


def llama_row(
    path: Path,
    name: str,
    work: Workload,
    reference: Sequence[np.ndarray],
    reference_greedy: Sequence[Sequence[int]],
    *,
    n_threads: int,
    progress: Progress = _no_progress,
) -> Row:
    """A llama.cpp model (LlamaCppPeer) on the same chunks: each chunk in one batch with
    every position's logits, as quantization needs no per-token decisions."""
    from river_cpp.measure.llama_peer import LlamaCppPeer

    with LlamaCppPeer(path, n_ctx=work.n_ctx, n_threads=n_threads, name=name) as peer:
        parts = []
        for c in progress(range(len(work.chunks)), name):
            run = _forced_chunk(peer, work, c, None, batched=True)
            parts.append(Positions.compare(reference[c], run.logits))
        divergence = mean_divergence(peer, work, reference_greedy)
    return Row(
        name,
        LLAMA,
        QualityReport.from_positions(Positions.concatenate(parts)),
        float(WeightBytes.of_files(path).full_backbone()),
        None,
        divergence,
    )


def _load_key(config: RiverConfig) -> tuple:
    """Configurations with equal keys can share one loaded model (each row passes its
    own policy to every run)."""
    return (
        config.river,
        tuple(sorted(config.river_types.items())),
        config.river_head,
        config.tail_layers,
        config.prefill,
    )


def run_comparison(
    backbone: Union[str, os.PathLike],
    entries: Sequence[Entry],
    work: Workload,
    *,
    ladder: Sequence[str] = (),
    n_threads: Optional[int] = None,
    seed: int = 0,
    progress: Progress = _no_progress,
    on_row: Callable[[Row], None] = lambda row: None,
    corpus: Sequence[str] = (),
    speculative: Optional[Speculative] = None,
) -> Comparison:
    """Measure every entry (and its controls) and every ladder rung against the backbone.

    ladder: llama.cpp rungs: "F16" is the backbone GGUF itself, others LADDER_TYPES keys.
    progress(items, desc) wraps each loop (e.g. in a progress bar); on_row sees each
    row as soon as it is measured. speculative: River rows' greedy runs are lossless
    River's (their tokens until divergence then measure the verification, not the exits).
    """
    from river_cpp._cpus import n_threads_or_default
    from river_cpp.measure.ladder import rung_path

    work.check()
    backbone = Path(backbone)
    n_threads = n_threads_or_default(n_threads)
    with RiverModel(backbone, river=None, n_ctx=work.n_ctx, n_threads=n_threads) as model:
        reference, reference_greedy = reference_run(model, work, progress)
        n_layer = model.n_layer
    backbone_weights = WeightBytes.of_files(backbone)
    comparison = Comparison(
        str(backbone),
        n_layer,
        work.prefix,
        work.forced,
        len(work.chunks),
        len(work.prompts),
        work.divergence_tokens,
        backbone_weights.full_backbone(),
        corpus=list(corpus),
    )

    def add(row: Row) -> None:
        comparison.rows.append(row)
        on_row(row)

    model, key, weights = None, None, None
    try:
        for entry in entries:
            if _load_key(entry.config) != key:
                if model is not None:
                    model.close()
                model = entry.config.load(
                    backbone, n_ctx=work.n_ctx, n_threads=n_threads, progress=progress is not _no_progress
                )
                key = _load_key(entry.config)
                weights = backbone_weights.with_river(model.river_path)
            for row in river_rows(
                model,
                entry,
                work,
                reference,
                reference_greedy,
                weights,
                seed=seed,
                progress=progress,
                speculative=speculative if model.has_river else None,
            ):
                add(row)
    finally:
        if model is not None:
            model.close()
    for rung in progress(ladder, "llama.cpp ladder"):
        path = rung_path(backbone, rung)  # a quantization is made once, then cached
        add(llama_row(path, peer_name(rung), work, reference, reference_greedy, n_threads=n_threads, progress=progress))
    return comparison
