"""Lossless River: drafts verified by the backbone, several tokens per forward.

A round feeds the last accepted token and up to N drafted ones through the backbone
in one forward with logits at every position, keeps the longest agreeing prefix
plus the backbone's own next token, and rewinds the cache past the rest. Drafts come
from the sources in river_cpp.decoding.drafts: the river on the backbone's own KV cache (its
K/V rows are overwritten by the backbone's in the same slots, so after a round the
cache holds exactly what a backbone-only run would), n-gram matches in the context,
or a separate model; each round river_cpp.decoding.draft_length picks the source and the
length. The tokens are the backbone's own (river_cpp.decoding.acceptance): its greedy
sequence at temperature 0, and with a seed the very tokens a plain sampled run
draws otherwise.

This module is the second implementation of generation's token loop
(river_cpp.decoding.generation.generate_step); it owns the round, not text or stopping.
"""

from __future__ import annotations

import functools
import time
from typing import Iterator, Mapping, Optional, Sequence

import numpy as np

from river_cpp.decoding.acceptance import Distribution, verify_drafts
from river_cpp.decoding.draft_guard import RoundGuard
from river_cpp.decoding.draft_length import PLAIN, DraftLength
from river_cpp.decoding.draft_memory import memory_of
from river_cpp.decoding.drafts import (
    Draft,
    LookupDraft,
    ModelDraft,
    NgramDraft,
    Proposal,
    RecallDraft,
    RiverDraft,
    ngram_source,
    recall_source,
)
from river_cpp.decoding.grammar import Grammar, GrammarState
from river_cpp.decoding.sampling import NoLegalToken, Sampler
from river_cpp.decoding.speculative_options import RECALL_MIN_MATCH, Speculative
from river_cpp.decoding.speculative_stats import SpeculativeStats
from river_cpp.decoding.steps import Step, prefill_requests
from river_cpp.decoding.suffix_index import MATCH_BUCKETS
from river_cpp.engine.compute.backbone import Backbone, common_prefix
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.engine.compute.requests import Forward, Requests, alone, call

# ---------------------------------------------------------------- sources


def _sources(
    model: Backbone, spec: Speculative, lengths: DraftLength, stats: SpeculativeStats, memory_home: object
) -> dict[str, Draft]:
    """The draft sources `spec` names, by name ("river", "ngram", "memory", "corpus",
    "model"); in the portfolio the river copies n-gram matches midway where `lengths`
    says it pays. `memory_home`: what keeps the draft memory (the sequence's backbone).
    The sizes of the memory and corpus indexes go to `stats`."""
    sources: dict[str, Draft] = {}
    ngrams = None
    if spec.uses_ngrams:
        ngrams = sources["ngram"] = NgramDraft(spec.ngram_min, spec.ngram_max)
    if spec.uses_ngrams and spec.memory:
        memory = memory_of(memory_home)
        sources["memory"] = RecallDraft(
            "memory",
            lambda history, n: memory.propose(history, n, RECALL_MIN_MATCH),
            on_begin=lambda history: memory.begin(history, spec.memory_tokens),
            on_keep=memory.note,
        )
        stats.memory_capacity = spec.memory_tokens
    if spec.uses_ngrams and spec.corpus:
        from river_cpp.decoding.draft_corpus import load_corpus

        corpus = load_corpus(model.tokenizer, spec.corpus)
        sources["corpus"] = RecallDraft(
            "corpus", lambda history, n: corpus.index.propose(history, n, RECALL_MIN_MATCH)[:2]
        )
        stats.corpus_tokens = corpus.tokens
    if spec.uses_river:
        policy = spec.draft if isinstance(spec.draft, ExitPolicy) else ExitPolicy.at_layer(0)
        sources["river"] = RiverDraft(model, policy, spec.draft_vocab, copies=ngrams, copy_pays=lengths.copy_pays)
    elif not isinstance(spec.draft, str):
        sources["model"] = ModelDraft(model, spec.draft)
    return sources


def _offer_name(name: str, source: Draft) -> str:
    """The name drafting statistics are kept under: lookups per match size."""
    return source.offer_name if isinstance(source, LookupDraft) else name


# What a model has learned of its drafts' costs and acceptance is kept from one
# generation to the next, with the model: in its `learned_drafting` dict (one per
# backbone, shared by all its sequences, since costs and acceptance are the model's).
# A chat is many short generations; learning the costs afresh in each (a plain step, a
# first draft, exploring lengths, probing) cost the demo model several percent of its
# speed. A model without that dict learns per generation.
_MAX_LEARNED_PER_MODEL = 16


def new_draft_length(spec: Speculative, adaptive: bool) -> DraftLength:
    """A fresh DraftLength for drafting as `spec` says: n-gram matches of its sizes and
    recalled matches (the draft memory, a corpus) are free sources, and a round that
    p_min may end early gets the sure length."""
    free = frozenset(ngram_source(n) for n in range(spec.ngram_min, spec.ngram_max + 1)) | frozenset(
        recall_source(kind, m) for kind in ("memory", "corpus") for m in MATCH_BUCKETS
    )
    return DraftLength(
        spec.max_draft, adaptive=adaptive, free_sources=free, ends_unsure=spec.p_min > 0.0, max_free=spec.max_lookup
    )


def draft_length_for(model: Backbone, spec: Speculative, greedy: bool) -> DraftLength:
    """The DraftLength that `model` keeps for drafting as `spec` says (a new one for a
    fixed length): per draft, draft length, thread count, and greedy or sampled."""
    return _learned_for(model, spec, greedy)[0]


def _learned_for(model: Backbone, spec: Speculative, greedy: bool) -> tuple[DraftLength, RoundGuard]:
    """draft_length_for's DraftLength and its round guard (the plain rounds' timings it
    keeps go with it)."""
    per_model = getattr(model, "learned_drafting", None)
    if not spec.adaptive or per_model is None:
        lengths = new_draft_length(spec, adaptive=spec.adaptive)
        return lengths, RoundGuard(lengths.free_sources)
    if isinstance(spec.draft, ExitPolicy):
        draft: object = (tuple(spec.draft.resolve(model.n_layer)), spec.draft.signal)
    else:
        draft = spec.draft if isinstance(spec.draft, str) else id(spec.draft)
    key = (draft, spec.max_draft, spec.max_lookup, spec.p_min, spec.draft_vocab, spec.ngram_min, spec.ngram_max)
    key += (spec.memory, spec.corpus, model.n_threads, greedy)
    if key not in per_model:
        if len(per_model) >= _MAX_LEARNED_PER_MODEL:
            per_model.clear()  # drafts made per request (new draft models) must not pile up
        lengths = new_draft_length(spec, adaptive=True)
        per_model[key] = (lengths, RoundGuard(lengths.free_sources))
    return per_model[key]


# ---------------------------------------------------------------- the loop


def observe_round(
    lengths: DraftLength,
    *,
    source: str,
    spans: Sequence[tuple[str, int]],
    n_accepted: int,
    draft_forwards: int,
    draft_seconds: float,
    verify_seconds: float,
    unused: Mapping[str, tuple[int, int]],
) -> None:
    """Record one round in `lengths`: the round `source` chose (PLAIN: none), whose
    drafts came in `spans` and kept n_accepted, then every free offer it did not
    draft, scored against the n_accepted + 1 tokens it emitted. `unused`: each free
    source on offer -> (tokens it proposed, how many of them agree with the emitted
    ones); the chosen one among them is skipped. The loop calls this after every
    round, and river_bench.draft_replay (benchmarks/) after every replayed one."""
    lengths.observe(
        n_drafted=sum(n for _, n in spans),
        n_accepted=n_accepted,
        draft_seconds=draft_seconds,
        verify_seconds=verify_seconds,
        draft_forwards=draft_forwards,
        source=source,
        spans=spans,
    )
    for offer, (proposed, agreeing) in unused.items():
        if offer != source:
            lengths.observe_unused(offer, proposed, agreeing, n_accepted + 1)


# The "token" a verify position yields where the grammar allows none: never a draft,
# so the verify stops there, and the round ends the generation after the drafts kept.
_DEAD_END = -1


def _target(
    sampler: Sampler,
    logits: np.ndarray,
    history: list[int],
    drafts: list[int],
    states: Optional[list[GrammarState]],
    j: int,
) -> Distribution:
    """The backbone's sampling distribution at draft position j of a verify (masked by
    the grammar's state after drafts[:j] when there is one)."""
    if states is None:
        return sampler.distribution(logits[j], history + drafts[:j])
    try:
        return sampler.distribution(logits[j], history + drafts[:j], states[j])
    except NoLegalToken:
        return np.array([_DEAD_END]), np.ones(1)


def _forced_tokens(model: Backbone, state: GrammarState, limit: int) -> list[int]:
    """The tokens the grammar allows alone from `state` on (at most `limit`, never an
    end of generation), accepted into `state`."""
    forced: list[int] = []
    while len(forced) < limit:
        token = state.forced()
        if token is None or model.tokenizer.is_end_of_generation(token):
            break
        state.accept(token)
        forced.append(token)
    return forced


def _grammar_states(state: GrammarState, drafts: list[int]) -> list[GrammarState]:
    """The grammar's states before each of the longest prefix of `drafts` it allows and
    after the last of them (one more than the drafts kept): a drafted token the grammar
    forbids ends the draft before the verify."""
    states = [state]
    for token in drafts:
        if not states[-1].allows(token):
            break
        after = states[-1].clone()
        after.accept(token)
        states.append(after)
    return states


def speculative_step(
    model: Backbone,
    prompt_ids: Sequence[int],
    sampler: Sampler,
    spec: Speculative,
    stats: Optional[SpeculativeStats] = None,
    *,
    grammar: Optional[Grammar] = None,
) -> Iterator[Step]:
    """speculative_loop run on `model` alone, on this thread: the Steps."""
    return alone(model, speculative_loop(model, prompt_ids, sampler, spec, stats, grammar=grammar))


def speculative_loop(
    model: Backbone,
    prompt_ids: Sequence[int],
    sampler: Sampler,
    spec: Speculative,
    stats: Optional[SpeculativeStats] = None,
    *,
    grammar: Optional[Grammar] = None,
) -> Requests:
    """decode_loop's speculative twin: the backbone's tokens, several per forward; a
    request loop (river_cpp.engine.compute.requests).

    The prompt runs the full backbone. Each yielded Step carries the backbone's
    logits at that position and exit layer n_layer (every token is verified). With a
    `grammar`, drafts end at the first token it forbids and the verify compares with
    the backbone's masked distribution: the tokens of plain constrained decoding.
    """
    if not isinstance(sampler, Sampler):
        raise TypeError("speculative decoding needs a river_cpp.decoding.sampling.Sampler (it compares distributions)")
    stats = stats if stats is not None else SpeculativeStats()
    greedy = sampler.params.temperature == 0.0
    n_layer = model.n_layer
    lengths, guard = _learned_for(model, spec, greedy)
    guard.begin_request()
    stats.guard_rested, stats.round_times = guard.rested, guard.times
    memory_home = (yield call("drafting_home")) if spec.uses_ngrams and spec.memory else None
    sources = _sources(model, spec, lengths, stats, memory_home)
    history = list(prompt_ids)
    for source in sources.values():
        source.begin(history)
    if memory_home is not None:
        stats.memory_tokens = memory_of(memory_home).tokens
    state = grammar.start() if grammar is not None else None
    logits, cached_tokens = yield from prefill_requests(prompt_ids, route="backbone")
    if state is None:
        token = sampler(logits, history)
    else:
        token = sampler(logits, history, state)
        state.accept(token)
    history.append(token)
    for source in sources.values():
        source.keep(history)
    yield Step(token, logits, n_layer, cached_tokens)
    while True:
        start = yield call("n_past")  # every token of `history` but the last is in the cache
        if start + 1 >= model.n_ctx:
            return
        tokens, verify_logits, state, dead_end = yield from _round(
            model, spec, sampler, sources, lengths, guard, stats, history, state, start
        )
        for j, token in enumerate(tokens):
            yield Step(token, verify_logits[j], n_layer)
        if dead_end:
            raise NoLegalToken("the grammar allows no token here")


def _round(
    model: Backbone,
    spec: Speculative,
    sampler: Sampler,
    sources: Mapping[str, Draft],
    lengths: DraftLength,
    guard: RoundGuard,
    stats: SpeculativeStats,
    history: list[int],
    state: Optional[GrammarState],
    start: int,
) -> Requests:
    """One round of speculative_loop after `history` (its last token not yet in the
    cache, which holds `start` positions): the tokens the grammar forces, drafts from
    the source and length `lengths` chooses, one backbone forward verifying them, and
    the tokens kept appended to `history`. Returns those tokens, the verify's logits
    (row j: the j-th token's), the grammar's state after them, and whether the
    grammar allows no token next (the generation ends after them)."""
    began = time.perf_counter()
    guard.start_round(began)
    forced, chosen, proposal, states, named = yield from _draft(
        model, spec, sampler, sources, lengths, guard, history, state, start
    )
    base = len(forced)  # verify rows before the first draft's
    drafts = proposal.tokens
    drafted_at = time.perf_counter()

    # Verify: the last accepted token (after any forced ones) and the drafts in
    # one backbone forward.
    yield call("rewind", start)
    verify_logits = yield Forward(history[start:] + drafts, route="backbone")
    n_accepted, after = verify_drafts(
        drafts,
        functools.partial(_target, sampler, verify_logits[base:], history, drafts, states),
        sampler.peek(len(drafts) + 1),
    )
    dead_end = after == _DEAD_END
    new = drafts[:n_accepted] + ([] if dead_end else [after])
    sampler.skip(len(new))
    if states is not None:
        state = states[n_accepted]
        if not dead_end:
            state.accept(after)
    verified_at = time.perf_counter()

    yield call("rewind", start + base + len(new))
    observe_round(
        lengths,
        source=chosen,
        spans=proposal.spans,
        n_accepted=n_accepted,
        draft_forwards=proposal.forwards,
        draft_seconds=drafted_at - began - proposal.catch_up_seconds,
        verify_seconds=verified_at - drafted_at,
        unused={
            offer: (len(source.offer), common_prefix(source.offer, new))
            for offer, source in named.items()
            if isinstance(source, LookupDraft)
        },
    )
    stats.rounds += 1
    stats.drafted += len(drafts)
    stats.accepted += n_accepted
    stats.generated += base + len(new)
    stats.forced += base
    stats.draft_forwards += proposal.forwards
    stats.draft_seconds += drafted_at - began
    stats.catch_up_seconds += proposal.catch_up_seconds
    stats.verify_seconds += verified_at - drafted_at
    stats.count(chosen if drafts else PLAIN, proposal.spans, n_accepted)
    guard.end_round(chosen if drafts else PLAIN, base + len(new), began, len(drafts), n_accepted)
    stats.guard_rests = guard.rests
    history += new
    for source in sources.values():
        source.keep(history)
    return forced + new, verify_logits, state, dead_end


def _draft(
    model: Backbone,
    spec: Speculative,
    sampler: Sampler,
    sources: Mapping[str, Draft],
    lengths: DraftLength,
    guard: RoundGuard,
    history: list[int],
    state: Optional[GrammarState],
    start: int,
) -> Requests:
    """A round's tokens to verify after `history`: the tokens the grammar forces (taken
    into `history`), then drafts from the source and length `lengths` chooses among
    those with a draft now (cut where the grammar forbids one). Returns the forced
    tokens, the source chosen, its proposal, the grammar's states before each draft
    and after the last (None without a grammar) and the sources by offer name."""
    # Tokens the grammar leaves no choice about are taken without a draft or a
    # forward of their own (each still uses its draw, as in the plain loop); their
    # K/V and logits come with this round's verify.
    limit = min(max(spec.max_draft, spec.max_lookup), model.n_ctx - start - 2)
    forced = _forced_tokens(model, state, limit) if state is not None else []
    if forced:
        sampler.skip(len(forced))
        history += forced
        for source in sources.values():
            source.keep(history)
    offers, named = {}, {}
    # Where other sequences share the backbone's batches (river_cpp.engine.compute.scheduler),
    # their rows fill each batch already: a draft that costs forwards of its own (the
    # river, a draft model) then loses on a CPU, while lookups, free, still pay.
    shared = getattr(model, "shares_batches", False)
    for name, source in sources.items():
        if shared and not isinstance(source, LookupDraft):
            continue
        most = spec.max_lookup if isinstance(source, LookupDraft) else spec.max_draft
        available = source.available(history, most)
        if available:
            offer = _offer_name(name, source)
            offers[offer], named[offer] = available, source
    room = model.n_ctx - start - 1 - len(forced)
    chosen, k = lengths.choose(room, guard.allowed(offers) if spec.adaptive else offers)
    proposal = (yield from named[chosen].propose(history, k, sampler, spec.p_min, state)) if k else Proposal()
    states = None
    if state is not None:
        states = _grammar_states(state, proposal.tokens)
        proposal.keep_first(len(states) - 1)
    return forced, chosen, proposal, states, named
