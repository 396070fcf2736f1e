"""Lossless decoding against the backbone and llama.cpp: decode tokens/s, interleaved
(benchmarks/speculative.py is its command line).

Two parts:
1. Costs (measure_costs): the backbone's verify time V(n)/V(1) for n = 1..max_verify
   positions, and one drafted token of each river relative to one backbone token.
2. Decode speed (decode): every configuration generates the same continuation of
   each prompt, configurations interleaved per prompt, for some rounds. Lossless rows
   (rows) also report acceptance, tokens per verify, whether every completion was
   token-identical to the backbone's (and, where one was not, the backbone's top-2
   logit gap at the first difference, relative to its logit scale), acceptance and
   the share of rounds per draft source (river, ngramN, plain), and the costs
   measured inside the loop: seconds per drafted token and per verify round, in
   tokens of our backbone's plain decode in the same run. Each lossless row's
   ceiling is the speed its loop would reach if every drafted token were accepted,
   from those in-loop costs (a separate draft's catch-ups left out, as the loop
   leaves them out), over the verify sizes its loop timed (a size it never timed
   may be cheaper). With a temperature every configuration samples instead (the same
   seed per prompt and round); lossless rows emit the plain run's tokens for the
   same seed, so they are compared too. A PromptLookupPeer row is
   llama-cpp-python's LlamaPromptLookupDecoding on the backbone file (its own loop;
   decode time from its first streamed token to its last).
Ratios are to our backbone in the same run.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from river_cpp.decoding.speculative import draft_length_for
from river_cpp.decoding.speculative_options import DEFAULT_DRAFT_VOCAB, Speculative
from river_cpp.engine.compute.backbone import Backbone
from river_cpp.engine.decisions.round_cost import DEFAULT_MAX_DRAFT
from river_cpp.engine.files.weight_bytes import WeightBytes
from river_cpp.measure.ladder import rung_path
from river_cpp.model import RiverModel

from river_bench.costs import ceiling, draft_cost, verify_costs

# ---------------------------------------------------------------- configurations


@dataclass
class Config:
    """One way to decode: a model and the generate options it decodes with."""

    name: str
    model: Backbone
    speculative: Optional[Speculative] = None
    seconds: list = field(default_factory=list)
    tokens: list = field(default_factory=list)
    drafted: int = 0
    accepted: int = 0
    rounds: int = 0
    generated: int = 0
    identical: int = 0
    compared: int = 0
    gaps: list = field(default_factory=list)  # top-2 gaps / logit scale where completions diverged
    draft_forwards: int = 0
    draft_seconds: float = 0.0
    catch_up_seconds: float = 0.0
    verify_seconds: float = 0.0
    by_source: dict = field(default_factory=dict)  # source -> [rounds, drafted, accepted]

    def run(self, prompt: str, n_tokens: int, temperature: float, seed: int) -> list[int]:
        self.model.reset()
        result = self.model.generate(
            prompt, max_tokens=n_tokens, speculative=self.speculative or False, temperature=temperature, seed=seed
        )
        self.seconds.append(result.generation_seconds)
        self.tokens.append(len(result.token_ids) - 1)
        if result.speculative is not None:
            self.drafted += result.speculative.drafted
            self.accepted += result.speculative.accepted
            self.rounds += result.speculative.rounds
            self.generated += result.speculative.generated
            self.draft_forwards += result.speculative.draft_forwards
            self.draft_seconds += result.speculative.draft_seconds
            self.catch_up_seconds += result.speculative.catch_up_seconds
            self.verify_seconds += result.speculative.verify_seconds
            for source, counts in result.speculative.by_source.items():
                total = self.by_source.setdefault(source, [0, 0, 0])
                total[0] += counts.rounds
                total[1] += counts.drafted
                total[2] += counts.accepted
        return result.token_ids

    @property
    def tokens_per_second(self) -> float:
        return sum(self.tokens) / sum(self.seconds)


class PromptLookupPeer:
    """llama-cpp-python decoding with its LlamaPromptLookupDecoding draft, on a GGUF."""

    def __init__(self, path: Path, n_ctx: int, n_threads: int, max_draft: int) -> None:
        from river_cpp.measure.llama_peer import load_prompt_lookup

        self.llama = load_prompt_lookup(path, n_ctx=n_ctx, n_threads=n_threads, max_draft=max_draft)

    def decode(self, prompt: str, n_tokens: int, temperature: float, seed: int) -> tuple[float, int]:
        """(seconds from the first streamed token to the last, tokens after the first)."""
        self.llama.reset()
        first = last = None
        count = 0
        for _ in self.llama.create_completion(
            prompt, max_tokens=n_tokens, temperature=temperature, seed=seed, stream=True, top_k=40, top_p=0.95
        ):
            last = time.perf_counter()
            first = first or last
            count += 1
        return (last - first if first else 0.0), max(count - 1, 0)


@dataclass
class LookupConfig(Config):
    """A configuration run by llama-cpp-python's own loop (its tokens are not compared)."""

    peer: Optional[PromptLookupPeer] = None

    def run(self, prompt: str, n_tokens: int, temperature: float, seed: int) -> list[int]:
        seconds, tokens = self.peer.decode(prompt, n_tokens, temperature, seed)
        self.seconds.append(seconds)
        self.tokens.append(tokens)
        return []


def open_peer(path: Path, n_ctx: int, n_threads: int) -> Backbone:
    from river_cpp.measure.llama_peer import LlamaCppPeer

    return LlamaCppPeer(path, n_ctx=n_ctx, n_threads=n_threads)


def divergence_gap(base: RiverModel, prompt: str, reference: list[int], tokens: list[int]) -> float:
    """The backbone's top-2 logit gap, relative to its logit scale, where `tokens` first
    leaves `reference` (batched and single-token logits may order a near-tie apart)."""
    i = next((i for i, (a, b) in enumerate(zip(reference, tokens)) if a != b), min(len(reference), len(tokens)))
    ids = base.tokenize(prompt, add_bos=True, special=True) + reference[:i]
    base.reset()
    logits = base.forward(ids, last_only=True, route="backbone")[0]
    top2 = np.sort(logits)[-2:]
    return float(top2[1] - top2[0]) / float(np.abs(logits).max())


def river_bytes(backbone: Path, model: RiverModel) -> int:
    """Matrix bytes of a token that runs every layer and the head on the river."""
    weights = WeightBytes.of_files(backbone, model.river_path)
    return int(weights.per_token([0], river_head=True)[0])


def configurations(
    backbone: Path,
    *,
    rivers: Sequence[str],
    heads: Sequence[str],
    drafts: Sequence[str],
    draft_vocabs: Sequence[int],
    p_mins: Optional[Sequence[float]],
    fixed: Sequence[int],
    draft_model: Optional[str],
    peers: Sequence[str],
    prompt_lookup: bool,
    n_ctx: int,
    threads: int,
) -> tuple[list[Config], dict[str, RiverModel]]:
    """(configurations, river models by name): our backbone first, then a lossless row
    per river type x head x draft vocabulary (0: all) x draft x p_min (None:
    Speculative's; several give a row each), each also at every `fixed` draft length,
    a separate `draft_model` drafting for the backbone, llama.cpp on each of `peers`
    (quantization rungs of the backbone) and, with `prompt_lookup`, llama-cpp-python's
    prompt lookup."""
    load = dict(n_ctx=n_ctx, n_threads=threads, progress=False)
    base = RiverModel(backbone, river=None, **load)
    configs = [Config("backbone (ours)", base)]
    # Speculative options and the label suffix of each p_min value
    spec_variants = [({}, "")]
    if p_mins:
        several = len(p_mins) > 1
        spec_variants = [({"p_min": p_min}, f" p_min {p_min:g}" if several else "") for p_min in p_mins]
    models = {}
    for river in rivers:
        for head in heads:
            name = river if head == "q8_0" else f"{river} head {head}"
            models[name] = RiverModel(backbone, river=river, river_head=head, **load)
            variants = itertools.product(draft_vocabs, drafts, spec_variants)
            for vocab, draft, (spec_options, suffix) in variants:
                label = name if vocab == (DEFAULT_DRAFT_VOCAB or 0) else f"{name} vocab {vocab or 'all'}"
                label = (f"{draft} ({label})" if "river" in draft else draft) + suffix
                options = dict(spec_options, draft_vocab=vocab or None, draft=draft)
                configs.append(Config(f"lossless {label}", models[name], Speculative(**options)))
                for k in fixed:
                    configs.append(
                        Config(
                            f"lossless {label} k={k}",
                            models[name],
                            Speculative(max_draft=k, max_lookup=k, adaptive=False, **options),
                        )
                    )
    if draft_model:
        small = RiverModel(draft_model, river=None, **load)
        for spec_options, suffix in spec_variants:
            label = f"draft {Path(draft_model).name}{suffix}"
            configs.append(Config(label, base, Speculative(draft=small, **spec_options)))
    for rung in peers:
        configs.append(Config(f"llama.cpp {rung}", open_peer(rung_path(backbone, rung), n_ctx, threads)))
    if prompt_lookup:
        lookup = PromptLookupPeer(backbone, n_ctx, threads, DEFAULT_MAX_DRAFT)
        configs.append(LookupConfig("llama-cpp-python prompt lookup", base, peer=lookup))
    return configs, models


def measure_costs(
    base: RiverModel, rivers: dict[str, RiverModel], context: list[int], max_verify: int, draft_vocabs: Sequence[int]
) -> dict:
    """The backbone's verify seconds of 1..max_verify positions after `context`, their
    ratios to one position, and each river's drafted token (per draft vocabulary, 0:
    all) relative to one backbone token."""
    costs: dict = {"verify": verify_costs(base, context, max_verify, 5)}
    costs["verify_ratio"] = {n: t / costs["verify"][1] for n, t in costs["verify"].items()}
    costs["draft_ratio"] = {
        f"{r} vocab {v or 'all'}": draft_cost(m, context, v or None, 9) / costs["verify"][1]
        for r, m in rivers.items()
        for v in draft_vocabs
    }
    return costs


def decode(
    configs: Sequence[Config],
    prompts: Sequence[str],
    n_tokens: int,
    temperature: float,
    rounds: int,
    progress: Callable[[str], None] = print,
) -> tuple[float, float]:
    """Every configuration on every prompt, interleaved per prompt, `rounds` times; the
    first configuration (our backbone) is the reference the lossless ones are compared
    with. Returns the 1-minute load average before and after."""
    base = configs[0].model
    load_before = os.getloadavg()
    for round_ in range(rounds):
        for i, prompt in enumerate(prompts):
            reference = None
            for config in configs:  # the backbone first: the others are compared with it
                tokens = config.run(prompt, n_tokens, temperature, seed=round_ * len(prompts) + i)
                if reference is None:
                    reference = tokens
                elif config.speculative is not None:
                    config.compared += 1
                    config.identical += tokens == reference
                    if tokens != reference and temperature == 0.0:
                        config.gaps.append(divergence_gap(base, prompt, reference, tokens))
        progress(f"round {round_ + 1}/{rounds} done")
    load_after = os.getloadavg()
    return load_before[0], load_after[0]


def rows(configs: Sequence[Config], temperature: float) -> list[dict]:
    """One result row per configuration: speed and ratio to the first (our backbone),
    and for lossless ones acceptance, identity, sources, in-loop costs and ceiling."""
    out = []
    base_speed = configs[0].tokens_per_second
    for c in configs:
        row = {"name": c.name, "tokens_per_second": c.tokens_per_second, "ratio": c.tokens_per_second / base_speed}
        if c.speculative is not None:
            row.update(
                rounds=c.rounds,
                generated=c.generated,
                draft_forwards=c.draft_forwards,
                acceptance=c.accepted / max(c.drafted, 1),
                tokens_per_verify=c.generated / max(c.rounds, 1),
                identical=f"{c.identical}/{c.compared}",
                divergence_gaps=c.gaps,
                # in-loop costs, relative to one token of our backbone's plain decode
                draft_cost=c.draft_seconds / max(c.draft_forwards, 1) * base_speed,
                verify_cost=c.verify_seconds / max(c.rounds, 1) * base_speed,
            )
            # A river round that copied an n-gram match midway counts as the river's round;
            # the copied tokens count as drafted (and accepted) by their n-gram size.
            row["sources"] = {
                source: {
                    "rounds": r,
                    "round_share": r / max(c.rounds, 1),
                    "drafted": d,
                    "drafted_share": d / max(c.drafted, 1),
                    "acceptance": a / max(d, 1),
                }
                for source, (r, d, a) in sorted(c.by_source.items())
            }
            # The verify sizes this loop timed (its learned DraftLength keeps their recent
            # medians), in steps of the backbone's plain decode, as the ratios are. A
            # RiverModel's loop runs on (and learns for) its backbone.
            runs_on = getattr(c.model, "backbone", c.model)
            verify = draft_length_for(runs_on, c.speculative, greedy=temperature == 0.0).verify
            sizes = range(2, c.speculative.max_draft + 2)
            timed = {n: verify.median(n) * base_speed for n in sizes if verify.timings(n)}
            row["verify_steps"] = timed
            if timed:
                # a drafted token's cost without a separate draft's catch-ups, as the loop decides on
                drafted = (c.draft_seconds - c.catch_up_seconds) / max(c.draft_forwards, 1) * base_speed
                row["ceiling"], row["ceiling_k"] = ceiling(drafted, timed)
        out.append(row)
    return out


def table_lines(result_rows: Sequence[dict]) -> list[str]:
    """The rows as the command prints them: a table, then each lossless row's ceiling."""
    lines = [
        f"\n{'configuration':44} {'tok/s':>8} {'ratio':>6} {'accept':>7} {'tok/verify':>10} {'identical':>9}"
        f" {'draft':>6} {'verify':>7}  source rounds/drafted tokens@acceptance"
    ]
    for row in result_rows:
        line = f"{row['name']:44} {row['tokens_per_second']:8.1f} {row['ratio']:6.2f}"
        if "sources" in row:
            line += f" {row['acceptance']:7.2f} {row['tokens_per_verify']:10.2f} {row['identical']:>9}"
            line += f" {row['draft_cost']:6.2f} {row['verify_cost']:7.2f}  "
            line += " ".join(
                f"{source} {v['round_share']:.0%}"
                + (f"/{v['drafted_share']:.0%}@{v['acceptance']:.2f}" if source != "plain" else "")
                for source, v in row["sources"].items()
            )
            if row["divergence_gaps"]:
                gaps = ", ".join(f"{g:.1e}" for g in row["divergence_gaps"])
                line += f"  (diverged at top-2 gaps {gaps} of the logit scale)"
        lines.append(line)
    for row in result_rows:
        if "ceiling" in row:
            lines.append(
                f"ceiling of {row['name']}: {row['ceiling']:.2f}x at k = {row['ceiling_k']}, every draft accepted"
            )
    return lines


def weight_bytes(backbone: Path, rivers: dict[str, RiverModel]) -> dict[str, int]:
    """Matrix bytes one token reads: the full backbone, and each river on its own."""
    return {
        "backbone": WeightBytes.of_files(backbone).full_backbone(),
        **{r: river_bytes(backbone, m) for r, m in rivers.items()},
    }
