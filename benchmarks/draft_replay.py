"""Replay the adaptive draft length on recorded acceptance, with measured costs.

    python benchmarks/draft_replay.py -m BACKBONE.gguf --river q4_0 --prompts chat \\
        -n 128 -t 2 --trace trace.json          # record (runs the models)
    python benchmarks/draft_replay.py --trace trace.json --replays 20   # replay only

A speed run of lossless River measures one draft-length policy on one day's machine;
its noise (the shared machine's, and the acceptance's) hides whether a change to
DraftLength helps. This records what decides the policy's worth once, then replays
the policy many times in milliseconds:

- the backbone's greedy continuation of each prompt, and at every position how many
  drafted tokens in a row the river would have got accepted there (up to --max-run),
  drafting on the shared cache exactly as the loop does;
- the measured costs: single timings of a drafted token and of a one-position verify,
  so the replay draws from their real spread (stalls included), and the median cost of
  verifying n positions (benchmarks/speculative.py's verify_costs), which scales a
  one-position draw into an n-position one.

The replay runs river_cpp.decoding.draft_length.DraftLength over the prompts in turn (it keeps
what it learned, as a model does), `--replays` times with fresh draws, and prints
tokens/s relative to plain decoding, with every fixed length as the control.
`--drafts` replays the portfolio: at each position an n-gram match from the context
(found again in the recorded tokens, river_cpp.decoding.ngram) is offered beside the river,
at no cost, with as many tokens accepted as its proposal shares with the backbone's
continuation; the fixed-length controls draft from the river alone. `--p-min` replays
Speculative.p_min from the river's top probability at each draft, which a trace records
along every position's chain of drafts (past a rejection too, as a round drafts on).
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from river_cpp import ExitPolicy, RiverModel
from river_cpp.decoding.acceptance import common_prefix
from river_cpp.decoding.draft_length import DraftLength
from river_cpp.decoding.drafts import copy_source, ngram_source, top_probability
from river_cpp.decoding.ngram import DEFAULT_NGRAM_MAX, DEFAULT_NGRAM_MIN, NgramIndex
from river_cpp.decoding.speculative import DEFAULT_P_MIN

# ---------------------------------------------------------------- recording


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def record(model: RiverModel, prompt_ids: list[int], n_tokens: int, max_run: int, chain: int) -> dict:
    """The backbone's greedy tokens after `prompt_ids`, the river's accepted run
    length at each of them, the river's top probability at each of its first `chain`
    drafts from there (past a rejection it drafts on from its own tokens, as a round
    does), and single timings of drafts and one-position verifies."""
    model.reset()
    result = model.generate(prompt_ids, max_tokens=n_tokens, policy=ExitPolicy.never(), speculative=False)
    tokens = list(prompt_ids) + list(result.token_ids)
    model.reset()
    model.forward(tokens[: len(prompt_ids) - 1], route="backbone")
    on_river = ExitPolicy.at_layer(0)  # the draft's route: the whole river
    runs, confidences, draft_times, verify_times = [], [], [], []
    for p in range(len(prompt_ids) - 1, len(tokens) - 1):
        # State: the backbone's rows for tokens[:p] are cached; tokens[p] is the last accepted.
        run, last, matching, top = 0, tokens[p], True, []
        while p + len(top) + 1 < len(tokens) and (len(top) < chain or (matching and run < max_run)):
            began = time.perf_counter()
            logits = model.forward([last], last_only=True, route="decode", policy=on_river)
            last = int(np.argmax(logits[0]))
            draft_times.append(time.perf_counter() - began)
            top.append(round(top_probability(logits[0]), 4))
            matching = matching and run < max_run and last == tokens[p + run + 1]
            run += matching
        runs.append(run)
        confidences.append(top[:chain])
        model.rewind(p)
        verify_times.append(_timed(functools.partial(model.forward, [tokens[p]], route="backbone")))
    return {
        "n_prompt": len(prompt_ids),
        "tokens": tokens,
        "runs": runs,
        "confidence": confidences,
        "draft": draft_times,
        "verify_1": verify_times,
    }


def ngram_offers(prompt: dict, n_min: int, n_max: int, max_draft: int) -> list[tuple[int, int, int]]:
    """At each recorded position: (n-gram size, proposal length, tokens of it the
    backbone accepts) of the n-gram draft, (0, 0, 0) where nothing matches."""
    tokens = prompt["tokens"]
    first = prompt["n_prompt"] - 1  # the position of the first run: the prompt's last token
    index = NgramIndex(n_min, n_max)
    index.extend(tokens[: first + 1])
    offers = []
    for p in range(first, first + len(prompt["runs"])):
        proposal, n = index.propose(max_draft)
        run = common_prefix(proposal, tokens[p + 1 : p + 1 + len(proposal)])
        offers.append((n if proposal else 0, len(proposal), run))
        index.extend(tokens[p + 1 : p + 2])
    return offers


# ---------------------------------------------------------------- replay


class Costs:
    """Draws of measured timings: a drafted token, and a verify of n positions (a
    one-position draw scaled by the measured curve's median ratio V(n)/V(1), or by
    `ratios`, V(n)/V(1) for n = 2, 3, ...: another day's or another loop's curve)."""

    def __init__(self, trace: dict, rng: np.random.Generator, ratios: Sequence[float] = ()) -> None:
        self.rng = rng
        self.draft = np.concatenate([np.asarray(t["draft"]) for t in trace["prompts"]])
        self.verify_1 = np.concatenate([np.asarray(t["verify_1"]) for t in trace["prompts"]])
        curve = {int(n): float(t) for n, t in trace["verify"].items()}
        self.ratio = {n: t / curve[1] for n, t in curve.items()}
        if ratios:
            self.ratio = {1: 1.0, **{n: r for n, r in enumerate(ratios, start=2)}}

    def drafts(self, k: int) -> float:
        return float(self.rng.choice(self.draft, size=k).sum()) if k else 0.0

    def verify(self, n: int) -> float:
        return float(self.rng.choice(self.verify_1)) * self.ratio[min(n, max(self.ratio))]


def river_round(
    prompt: dict,
    ngrams: Optional[list[tuple[int, int, int]]],
    p: int,
    k: int,
    length: DraftLength,
    copies: bool,
    p_min: float,
) -> tuple[int, list[tuple[str, int]], int]:
    """(accepted, spans, river forwards) of a river round of up to k drafts from
    position p, copying n-gram matches midway where `length` says it pays (as RiverDraft
    does, when `copies`), and ending after a draft whose top probability is below
    `p_min`. While every draft so far is accepted, the drafts are
    the backbone's tokens, so the recorded run and offer at the current position hold;
    after a rejection nothing more is accepted and the rest is drafted by the river
    (the costlier guess). The top probabilities are the recorded chain's from p while
    the river alone has drafted, else the first of the current position's chain."""
    runs, chains = prompt["runs"], prompt.get("confidence")
    accepted, spans, forwards, d, ok, copied = 0, [], 0, 0, True, False
    while d < k:
        size, n, run = ngrams[p + d] if ngrams is not None else (0, 0, 0)
        n = min(n, k - d)
        copy = copy_source(size)
        if copies and ok and d and n and length.copy_pays(copy, n):
            spans.append((copy, n))
            ok = run >= n
            accepted += min(run, n)
            d, copied = d + n, True
            continue
        forwards += 1
        spans.append(("river", 1))
        ok = ok and runs[p + d] >= 1
        accepted += ok
        d += 1
        if p_min > 0.0 and chains is not None:
            chain, at = (chains[p + d - 1], 0) if copied else (chains[p], d - 1)
            if at < len(chain) and chain[at] < p_min:
                break  # the round ends after an unsure token, as _ForwardDraft.propose does
    return accepted, spans, forwards


def replay(
    trace: dict,
    costs: Costs,
    length: DraftLength,
    fixed: Optional[int] = None,
    ngrams: Optional[list[list[tuple[int, int, int]]]] = None,
    river: bool = True,
    p_min: float = 0.0,
) -> tuple[int, float]:
    """Tokens and seconds of decoding every prompt of `trace` with `length` choosing each
    round's source and draft length (or always `fixed` river tokens); `ngrams`: each
    prompt's n-gram offers (ngram_offers), `river`: whether the river is offered (and,
    with `ngrams`, copies matches midway), `p_min`: Speculative.p_min."""
    tokens, seconds = 0, 0.0
    for i, prompt in enumerate(trace["prompts"]):
        runs = prompt["runs"]
        offered = ngrams[i] if ngrams is not None else None
        p = 0
        while p < len(runs):
            room = len(runs) - p - 1
            offers = {}
            offer = ngram_source(offered[p][0]) if offered is not None and offered[p][1] else ""
            if offer:
                offers[offer] = offered[p][1]
            if river:
                offers["river"] = length.max_draft
            if fixed is not None:
                source, k = "river", min(fixed, room)
            else:
                source, k = length.choose(room, offers)
            forwards = 0
            if source == "river":
                accepted, spans, forwards = river_round(prompt, offered, p, k, length, fixed is None, p_min)
                k = sum(n for _, n in spans)
            else:
                accepted, spans = min(k, offered[p][2]) if k else 0, [(source, k)]
            draft_s = costs.drafts(forwards)
            verify_s = costs.verify(k + 1)
            if fixed is None:
                length.observe(
                    n_drafted=k,
                    n_accepted=accepted,
                    draft_seconds=draft_s,
                    verify_seconds=verify_s,
                    draft_forwards=forwards,
                    source=source if k or forwards else None,
                    spans=spans,
                )
                if offer and offer != source:  # scored against the emitted tokens, as the loop does
                    length.observe_unused(offer, offered[p][1], offered[p][2], accepted + 1)
            p += accepted + 1
            tokens += accepted + 1
            seconds += draft_s + verify_s
    return tokens, seconds


def summarize(
    trace: dict,
    replays: int,
    max_draft: int,
    seed: int,
    ratios: Sequence[float] = (),
    drafts: str = "river",
    ngram_sizes: tuple[int, int] = (DEFAULT_NGRAM_MIN, DEFAULT_NGRAM_MAX),
    p_min: float = 0.0,
) -> dict:
    """Tokens/s of the adaptive length (each replay) and of every fixed length (mean
    over replays), relative to plain decoding replayed with the same draws; river
    drafts stop below `p_min` (which needs a trace with the river's top probabilities)."""
    if p_min > 0.0 and any("confidence" not in prompt for prompt in trace["prompts"]):
        raise ValueError(
            "--p-min above 0 (the default is Speculative's) needs a trace recorded with the river's top "
            "probabilities: record it again, or replay with --p-min 0"
        )
    costs = Costs(trace, np.random.default_rng(seed), ratios)
    ngrams = None
    if "ngram" in drafts:
        ngrams = [ngram_offers(prompt, *ngram_sizes, max_draft) for prompt in trace["prompts"]]
    free = frozenset(ngram_source(n) for n in range(ngram_sizes[0], ngram_sizes[1] + 1))

    def rate(length: DraftLength, fixed: Optional[int] = None) -> float:
        n, s = replay(trace, costs, length, fixed, ngrams, river="river" in drafts, p_min=p_min)
        return n / s

    fixed = {k: [rate(DraftLength(max_draft, adaptive=False), k) for _ in range(replays)] for k in range(max_draft + 1)}
    plain = float(np.mean(fixed[0]))
    runs = np.concatenate([np.asarray(t["runs"]) for t in trace["prompts"]])
    return {
        "adaptive": [
            rate(DraftLength(max_draft, adaptive=True, free_sources=free, ends_unsure=p_min > 0.0)) / plain
            for _ in range(replays)
        ],
        "fixed": {k: float(np.mean(r)) / plain for k, r in fixed.items()},
        "acceptance_at_1": float(np.mean(runs >= 1)),
        "draft_cost": float(np.median(costs.draft) / np.median(costs.verify_1)),
        "verify_ratio": {n: round(r, 2) for n, r in costs.ratio.items()},
    }


# ---------------------------------------------------------------- main


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", help="backbone GGUF: record a trace (without it, replay --trace)")
    p.add_argument("--river", default="q4_0")
    p.add_argument("--head", default="q4_0", help="the river's LM head type (default q4_0)")
    p.add_argument("--prompts", choices=["chat", "humaneval", "grounded"], default="chat")
    p.add_argument("--n-prompts", type=int, default=4)
    p.add_argument("-n", "--n-tokens", type=int, default=128)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--max-run", type=int, default=16, help="longest accepted run recorded per position")
    p.add_argument("--trace", required=True, help="trace JSON: written when recording, read when replaying")
    p.add_argument("--replays", type=int, default=20)
    p.add_argument("--max-draft", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--verify-ratios",
        type=float,
        nargs="+",
        default=[],
        metavar="R",
        help="replay with this verify curve instead of the recorded one: V(n)/V(1) for n = 2, 3, ... "
        "(the last one extends to longer verifies)",
    )
    p.add_argument(
        "--drafts",
        choices=["river", "ngram", "river+ngram"],
        default="river",
        help="the sources the adaptive replay offers (n-gram offers need a trace with tokens)",
    )
    p.add_argument("--ngram-min", type=int, default=DEFAULT_NGRAM_MIN)
    p.add_argument("--ngram-max", type=int, default=DEFAULT_NGRAM_MAX)
    p.add_argument(
        "--p-min",
        type=float,
        nargs="+",
        default=[DEFAULT_P_MIN],
        metavar="P",
        help="replay with each of these Speculative.p_min values: a river round ends after a token whose "
        "top probability is lower (0: never)",
    )
    args = p.parse_args(argv)

    if args.model:
        from speculative import chat_prompts, humaneval_prompts, verify_costs

        model = RiverModel(args.model, river=args.river, river_head=args.head, n_ctx=2048, n_threads=args.threads)
        if args.prompts == "humaneval":
            texts = humaneval_prompts(args.n_prompts)
        else:
            texts = chat_prompts(model, args.n_prompts, f"{args.prompts}_prompts.txt")
        prompts = [model.tokenize(t, add_bos=True, special=True) for t in texts]
        trace = {
            "model": Path(args.model).name,
            "river": args.river,
            "head": args.head,
            "prompts_kind": args.prompts,
            "threads": args.threads,
            "verify": verify_costs(model, prompts[0], 16, 9),
            "prompts": [record(model, ids, args.n_tokens, args.max_run, args.max_draft) for ids in prompts],
        }
        Path(args.trace).write_text(json.dumps(trace))
    trace = json.loads(Path(args.trace).read_text())
    print(f"{trace['model']} {trace['river']} river ({trace['prompts_kind']}), {len(trace['prompts'])} prompts")
    for p_min in args.p_min:
        result = summarize(
            trace,
            args.replays,
            args.max_draft,
            args.seed,
            args.verify_ratios,
            args.drafts,
            (args.ngram_min, args.ngram_max),
            p_min,
        )
        adaptive = np.asarray(result["adaptive"])
        print(f"  p_min {p_min}:")
        accepted, cost = result["acceptance_at_1"], result["draft_cost"]
        print(f"    acceptance of a 1-token draft {accepted:.2f}, draft cost {cost:.2f}")
        print(f"    V(n)/V(1): {result['verify_ratio']}")
        print(
            f"    adaptive ({args.drafts}): mean {adaptive.mean():.3f}x, "
            f"min {adaptive.min():.3f}x, max {adaptive.max():.3f}x"
        )
        print("    fixed k:  " + "  ".join(f"{k}: {r:.3f}x" for k, r in result["fixed"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
