"""Replay the adaptive draft length on recorded acceptance, with measured costs
(benchmarks/draft_replay.py is its command line).

A speed run of lossless River measures one draft-length policy on one day's machine;
its noise (the shared machine's, and the acceptance's) hides whether a change to
DraftLength helps. This records what decides the policy's worth once, then replays
the policy many times in milliseconds:

- the backbone's greedy continuation of each prompt, and at every position how many
  drafted tokens in a row the river would have got accepted there (up to max_run),
  drafting on the shared cache exactly as the loop does;
- the measured costs: single timings of a drafted token and of a one-position verify,
  so the replay draws from their real spread (stalls included), and the median cost of
  verifying n positions (river_bench.costs.verify_costs), which scales a
  one-position draw into an n-position one.

The replay runs the loop's own round controller over the prompts in turn: the
DraftLength river_cpp.decoding.speculative.new_draft_length makes, choosing each
round's source and length, and speculative.observe_round recording it (it keeps what
it learned, as a model does). It reports tokens/s relative to plain decoding, with
every fixed length as the control. With n-gram drafts it replays the portfolio: at
each position an n-gram match from the context (found again in the recorded tokens,
river_cpp.decoding.ngram) is offered beside the river, at no cost, with as many tokens
accepted as its proposal shares with the backbone's continuation; the fixed-length
controls draft from the river alone. `p_min` replays Speculative.p_min from the
river's top probability at each draft, which a trace records along every position's
chain of drafts (past a rejection too, as a round drafts on).
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from river_cpp.decoding.draft_length import DraftLength
from river_cpp.decoding.drafts import copy_source, ngram_source, top_probability
from river_cpp.decoding.ngram import DEFAULT_NGRAM_MAX, DEFAULT_NGRAM_MIN, NgramIndex
from river_cpp.decoding.speculative import Speculative, new_draft_length, observe_round
from river_cpp.engine.compute.backbone import common_prefix
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.model import RiverModel

from river_bench.costs import verify_costs
from river_bench.prompts import prompt_set

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
        while model.has_river and p + len(top) + 1 < len(tokens) and (len(top) < chain or (matching and run < max_run)):
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


def ngram_bound(ngrams: Sequence[Sequence[tuple[int, int, int]]], ratio: dict[int, float]) -> float:
    """Tokens per one-position verify of n-gram drafting that knew which offered tokens
    the backbone keeps, over every prompt's offers (ngram_offers): at each position it
    drafts the kept prefix of the offer, cut to the length with the most tokens per
    verify cost (`ratio`: V(n)/V(1)), or decodes plainly. The bound for any controller
    drafting these offers, in the units of the replays' ratio to plain decoding."""
    tokens, cost = 0, 0.0
    for offers in ngrams:
        p = 0
        while p < len(offers):
            kept = min(offers[p][2], len(offers) - p - 1, max(ratio) - 1)
            k = max(range(kept + 1), key=lambda j: (j + 1) / ratio[j + 1])
            tokens, cost, p = tokens + k + 1, cost + ratio[k + 1], p + k + 1
    return tokens / cost


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
                accepted, spans = (min(k, offered[p][2]), [(source, k)]) if k else (0, [])
            draft_s = costs.drafts(forwards)
            verify_s = costs.verify(k + 1)
            if fixed is None:
                observe_round(
                    length,
                    source=source,
                    spans=spans,
                    n_accepted=accepted,
                    draft_forwards=forwards,
                    draft_seconds=draft_s,
                    verify_seconds=verify_s,
                    unused={offer: offered[p][1:]} if offer else {},
                )
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
            "p_min above 0 (the default is Speculative's) needs a trace recorded with the river's top "
            "probabilities: record it again, or replay with p_min 0 (--p-min 0)"
        )
    costs = Costs(trace, np.random.default_rng(seed), ratios)
    ngrams = None
    if "ngram" in drafts:
        ngrams = [ngram_offers(prompt, *ngram_sizes, max_draft) for prompt in trace["prompts"]]

    low, high = ngram_sizes
    # n-gram offers are at most max_draft tokens here (ngram_offers): the recorded verify
    # curves reach max_draft + 1 positions
    spec = Speculative(
        draft=drafts, max_draft=max_draft, max_lookup=max_draft, p_min=p_min, ngram_min=low, ngram_max=high
    )

    def rate(length: DraftLength, fixed: Optional[int] = None) -> float:
        n, s = replay(trace, costs, length, fixed, ngrams, river=spec.uses_river, p_min=p_min)
        return n / s

    lengths = range(max_draft + 1) if spec.uses_river else range(1)  # the fixed lengths are the river's
    fixed = {k: [rate(new_draft_length(spec, adaptive=False), k) for _ in range(replays)] for k in lengths}
    plain = float(np.mean(fixed[0]))
    runs = np.concatenate([np.asarray(t["runs"]) for t in trace["prompts"]])
    return {
        "adaptive": [rate(new_draft_length(spec, adaptive=True)) / plain for _ in range(replays)],
        "fixed": {k: float(np.mean(r)) / plain for k, r in fixed.items()},
        "acceptance_at_1": float(np.mean(runs >= 1)),
        "ngram_bound": ngram_bound(ngrams, costs.ratio) if ngrams else None,
        "draft_cost": float(np.median(costs.draft) / np.median(costs.verify_1)) if len(costs.draft) else 0.0,
        "verify_ratio": {n: round(r, 2) for n, r in costs.ratio.items()},
    }


def record_trace(
    path: str,
    *,
    river: Optional[str],
    head: str,
    prompts: str,
    n_prompts: int,
    n_tokens: int,
    threads: int,
    max_run: int,
    chain: int,
) -> dict:
    """A trace of the backbone GGUF at `path` with a river of type `river` (head type
    `head`) on `n_prompts` of the prompt set `prompts`: the verify curve and each
    prompt's record() of n_tokens, `chain` top probabilities per position. river None:
    no river (the tokens and timings, for replaying n-gram drafts alone)."""
    model = RiverModel(path, river=river, river_head=head if river else None, n_ctx=2048, n_threads=threads)
    ids = [model.tokenize(t, add_bos=True, special=True) for t in prompt_set(model.tokenizer, prompts, n_prompts)]
    return {
        "model": Path(path).name,
        "river": river,
        "head": head,
        "prompts_kind": prompts,
        "threads": threads,
        "verify": verify_costs(model, ids[0], max(16, chain + 1), 9),
        "prompts": [record(model, prompt, n_tokens, max_run, chain) for prompt in ids],
    }


def summary_lines(result: dict, drafts: str) -> list[str]:
    """A summarize() result as the lines the command prints."""
    adaptive = np.asarray(result["adaptive"])
    accepted, cost = result["acceptance_at_1"], result["draft_cost"]
    lines = [
        f"    acceptance of a 1-token draft {accepted:.2f}, draft cost {cost:.2f}",
        f"    V(n)/V(1): {result['verify_ratio']}",
        f"    adaptive ({drafts}): mean {adaptive.mean():.3f}x, min {adaptive.min():.3f}x, max {adaptive.max():.3f}x",
        "    fixed k:  " + "  ".join(f"{k}: {r:.3f}x" for k, r in result["fixed"].items()),
    ]
    if result.get("ngram_bound"):
        lines.append(f"    n-gram bound (drafting only the offered tokens that are kept): {result['ngram_bound']:.3f}x")
    return lines
