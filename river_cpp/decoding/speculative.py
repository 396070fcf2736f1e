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
import numbers
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from river_cpp.decoding.acceptance import Distribution, verify_drafts
from river_cpp.decoding.draft_guard import ALL, RoundGuard, RoundTimes
from river_cpp.decoding.draft_length import PLAIN, DraftLength, drafts_by_source
from river_cpp.decoding.draft_memory import DEFAULT_MEMORY_TOKENS, memory_of
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
from river_cpp.decoding.ngram import DEFAULT_NGRAM_MAX, DEFAULT_NGRAM_MIN
from river_cpp.decoding.sampling import NoLegalToken, Sampler
from river_cpp.decoding.steps import Step, prefill
from river_cpp.decoding.suffix_index import MATCH_BUCKETS
from river_cpp.engine.backbone import Backbone, common_prefix
from river_cpp.engine.policy import ExitPolicy
from river_cpp.engine.round_cost import DEFAULT_MAX_DRAFT

# A lookup's draft (an n-gram match, the memory, a corpus) costs nothing to propose,
# so only the verify bounds it. Where the output copies its input, 8-token rounds
# capped it: verifying n positions grows ~0.25-0.3 of a step per position on the
# 1.5B Q4_K_M (2 threads), so 9 tokens a round could never beat 2.8x a step. On its
# recorded input-grounded answers, the bound of drafting only the kept tokens went
# from 1.80x with rounds of 8 to 2.00x with 24, the controller's replay from 1.49x to
# 1.58x, and live from 1.57x to 1.84x (docs/results.md, "Longer lookups").
DEFAULT_MAX_LOOKUP = 24
# A river or model draft ends its round after a token it is unsure of (docs/results.md:
# in replays 0.5 helped every trace but the 0.5B's input-grounded one, -3%).
DEFAULT_P_MIN = 0.5
# None: the river drafts from the whole vocabulary. A prefix pays less than it costs
# on Qwen2.5-Coder-0.5B (docs/results.md): its first 32768 ids skip 78% of the head
# (a quarter of the draft's bytes) but cover only 96% of HumanEval's tokens, and each
# token outside ends a round; at a fixed 4-token draft, acceptance fell from 0.93 to
# 0.79 (32768) and 0.87 (65536) for a 5-20% cheaper draft.
DEFAULT_DRAFT_VOCAB: Optional[int] = None
# The named drafts: the river alone, n-gram matches alone, or both (the portfolio:
# each round the source the running statistics favour).
DRAFTS = ("river+ngram", "river", "ngram")
DEFAULT_DRAFT = "river+ngram"
# Matches outside the context (earlier calls, a corpus) shorter than this are not
# offered: two tokens of code recur everywhere with different continuations.
RECALL_MIN_MATCH = 2


@dataclass(frozen=True)
class Speculative:
    """How to draft: which draft, at most how many tokens a round, when to stop early.

    draft: "river+ngram" (default: each round, an n-gram match from the context or
        the river, whichever the running statistics favour, or neither), "river"
        (every layer on the river, sharing the backbone's cache), "ngram" (only
        matches from the context: needs no river), an ExitPolicy (River's own exits
        drafting, on the same cache), or another Backbone with the same
        vocabulary and its own cache (a smaller GGUF: classic speculative decoding).
    max_draft: most tokens a river or model draft proposes per round.
    max_lookup: most tokens a lookup (an n-gram match, the memory, a corpus)
        proposes per round: free to propose, so longer than max_draft by default.
    p_min: end a river or model draft's round after a token whose own top
        probability is below this (the token is still verified; 0: draft the chosen
        length). The adaptive length then gives such rounds the length that pays at
        full acceptance, as the tokens it drafts past an unsure one are sure ones.
    adaptive: choose each round's source and length from the running acceptance and
        the measured costs of drafting and verifying (plain decoding when no draft
        pays); False always drafts max_draft (or until p_min ends it, or the match's end).
    draft_vocab: a river draft proposes only token ids below this (its head scores
        no others); None: the whole vocabulary. The output stays the backbone's
        either way: a token the draft cannot propose is the backbone's own next
        token after a rejection.
    ngram_min, ngram_max: the n-gram sizes matched in the context (longest first).
    memory: with n-gram drafts, also draft from the model's memory of earlier calls
        (their prompts and outputs; river_cpp.decoding.draft_memory), and remember
        this call there. The memory is the model object's own.
    memory_tokens: the memory's capacity in tokens (least recently used go first).
    corpus: with n-gram drafts, also draft from these files and folders (a project's
        code, text; river_cpp.decoding.draft_corpus): indexed once, cached on disk by
        content, memory-mapped.
    """

    draft: Union[str, ExitPolicy, Backbone] = DEFAULT_DRAFT
    max_draft: int = DEFAULT_MAX_DRAFT
    max_lookup: int = DEFAULT_MAX_LOOKUP
    p_min: float = DEFAULT_P_MIN
    adaptive: bool = True
    draft_vocab: Optional[int] = DEFAULT_DRAFT_VOCAB
    ngram_min: int = DEFAULT_NGRAM_MIN
    ngram_max: int = DEFAULT_NGRAM_MAX
    memory: bool = True
    memory_tokens: int = DEFAULT_MEMORY_TOKENS
    corpus: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.draft, str) and self.draft not in DRAFTS:
            raise ValueError(f"draft must be one of {', '.join(DRAFTS)}, an ExitPolicy or a model, got {self.draft!r}")
        _check_int("max_draft", self.max_draft, 1, 64)
        _check_int("max_lookup", self.max_lookup, 1, 64)
        if isinstance(self.p_min, bool) or not isinstance(self.p_min, numbers.Real) or not 0.0 <= self.p_min < 1.0:
            raise ValueError(f"p_min must be a number in [0, 1), got {self.p_min!r}")
        if self.draft_vocab is not None:
            _check_int("draft_vocab", self.draft_vocab, 1, None)
        _check_int("ngram_min", self.ngram_min, 1, 16)
        _check_int("ngram_max", self.ngram_max, self.ngram_min, 16)
        if not isinstance(self.memory, bool):
            raise ValueError(f"memory must be True or False, got {self.memory!r}")
        _check_int("memory_tokens", self.memory_tokens, 1, None)
        object.__setattr__(self, "corpus", _corpus_paths(self.corpus))

    @property
    def uses_river(self) -> bool:
        """Whether this draft runs the model's river."""
        return isinstance(self.draft, ExitPolicy) or self.draft in ("river", "river+ngram")

    @property
    def uses_ngrams(self) -> bool:
        return self.draft in ("ngram", "river+ngram")


def _corpus_paths(corpus: object) -> tuple[str, ...]:
    """`corpus` (one path or a sequence of them) as a tuple of path strings."""
    if isinstance(corpus, (str, Path)):
        corpus = (corpus,)
    if not isinstance(corpus, (tuple, list)) or not all(isinstance(p, (str, Path)) and str(p) for p in corpus):
        raise ValueError(f"corpus must be a path or a sequence of paths, got {corpus!r}")
    return tuple(str(p) for p in corpus)


def _check_int(name: str, value: object, low: int, high: Optional[int]) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or value < low
        or (high is not None and value > high)
    ):
        span = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be an integer {span}, got {value!r}")


@dataclass
class SourceStats:
    """Counts of one draft source in one generation."""

    rounds: int = 0  # rounds it was chosen for (a river round's copied matches count under their n-gram)
    drafted: int = 0  # tokens it proposed, in rounds of its own or copied into the river's
    accepted: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


@dataclass
class SpeculativeStats:
    """Counts of one speculative generation."""

    rounds: int = 0  # backbone verify forwards
    drafted: int = 0  # tokens the drafts proposed
    accepted: int = 0  # drafted tokens the backbone kept
    generated: int = 0  # tokens the rounds produced (accepted + the backbone's own + forced)
    forced: int = 0  # tokens a grammar allowed alone: taken without a draft or a forward of their own
    draft_forwards: int = 0  # single-token forwards of a river or model draft
    draft_seconds: float = 0.0  # spent drafting (forwards, lookups and choosing the drafted tokens)
    catch_up_seconds: float = 0.0  # of draft_seconds, a separate draft's catching its cache up (Proposal)
    verify_seconds: float = 0.0  # spent verifying (the backbone's forwards and the comparisons)
    by_source: dict[str, SourceStats] = field(default_factory=dict)  # "river", "ngram1".., "memory2".., "plain"
    memory_tokens: int = 0  # tokens in the model's memory of earlier calls as this one began
    memory_capacity: int = 0  # ... and its capacity (0: no memory drafted)
    corpus_tokens: int = 0  # tokens in the corpus index (0: none)
    guard_rests: int = 0  # times the round guard rested a source whose rounds lost to plain (RoundGuard)
    guard_rested: set[str] = field(default_factory=set)  # the sources it rested (ALL: drafting as a whole)
    round_times: RoundTimes = field(default_factory=RoundTimes)  # whole rounds, plain and drafted, as it timed them

    @property
    def acceptance_rate(self) -> float:
        """Share of drafted tokens kept (0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_round(self) -> float:
        """Tokens produced per backbone forward (1.0 is plain decoding)."""
        return self.generated / self.rounds if self.rounds else 0.0

    def summary(self) -> str:
        """One line: what was drafted and kept, by source, in words a first run reads."""
        sources = ", ".join(
            f"{'plain (no draft)' if name == PLAIN else name} {s.rounds} round{'' if s.rounds == 1 else 's'}"
            + (f", {s.drafted} drafted ({100 * s.acceptance_rate:.0f}% kept)" if s.drafted else "")
            for name, s in sorted(self.by_source.items())
        )
        indexes = []
        if self.memory_capacity:
            indexes.append(f"memory of earlier calls {self.memory_tokens:,} of {self.memory_capacity:,} tokens")
        if self.corpus_tokens:
            indexes.append(f"corpus {self.corpus_tokens:,} tokens")
        return (
            f"speculative: {self.drafted} drafted, {self.accepted} kept "
            f"({100 * self.acceptance_rate:.1f}%), {self.tokens_per_round:.2f} tokens per backbone forward"
            + (f"; {sources}" if sources else "")
            + (f"; {_paused_drafts(self.guard_rested)}" if self.guard_rested else "")
            + (f"; {', '.join(indexes)}" if indexes else "")
        )

    def speed_summary(self) -> Optional[str]:
        """One line: this request's speed against plain decoding, estimated from its own
        rounds (RoundTimes.speedup); None where no round drafted."""
        times = self.round_times
        if times.drafted_tokens == 0:
            return None
        speedup = times.speedup()
        if speedup is None:
            return (
                f"speed: not estimated against plain decoding (fewer than {times.MIN_PLAIN_ROUNDS} steps of this "
                "answer were decoded plain to compare with)"
            )
        plain_rate = times.plain_tokens / times.plain_seconds
        drafted_rate = times.drafted_tokens / times.drafted_seconds
        return (
            f"speed: about {speedup:.2f}x plain decoding (an estimate from this answer's own steps: those "
            f"decoded plain ran at {plain_rate:.1f} tokens/s, those with drafts at {drafted_rate:.1f} tokens/s)"
        )

    def count(self, source: str, spans: Sequence[tuple[str, int]], n_accepted: int) -> None:
        """One round that `source` chose (PLAIN: none), whose drafts came in `spans`."""
        self.by_source.setdefault(source, SourceStats()).rounds += 1
        for name, count in spans:
            self.by_source.setdefault(name, SourceStats()).drafted += count
        for name, (_, accepted) in drafts_by_source(spans, n_accepted).items():
            self.by_source[name].accepted += accepted


def _paused_drafts(rested: set[str]) -> str:
    """Which drafts the round guard paused, in words a first run reads (it names its
    sources by kind and match length, "ngram3", "memory4", and ALL: drafting as a whole)."""
    kinds = {"ngram": "n-gram drafts", "copy": "n-gram drafts", "memory": "drafts from earlier calls"}
    kinds.update(corpus="drafts from the corpus", river="river drafts", model="the draft model's drafts")
    named = sorted({next((v for k, v in kinds.items() if name.startswith(k)), name) for name in rested - {ALL}})
    if ALL in rested:
        named.append("all drafts")
    return f"{' and '.join(named)} paused for a while: they were slower than plain decoding here"


# ---------------------------------------------------------------- sources


def _sources(model: Backbone, spec: Speculative, lengths: DraftLength, stats: SpeculativeStats) -> dict[str, Draft]:
    """The draft sources `spec` names, by name ("river", "ngram", "memory", "corpus",
    "model"); in the portfolio the river copies n-gram matches midway where `lengths`
    says it pays. The sizes of the memory and corpus indexes go to `stats`."""
    sources: dict[str, Draft] = {}
    ngrams = None
    if spec.uses_ngrams:
        ngrams = sources["ngram"] = NgramDraft(spec.ngram_min, spec.ngram_max)
    if spec.uses_ngrams and spec.memory:
        memory = memory_of(model)
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


# What each model has learned of its drafts' costs and acceptance, kept from one
# generation to the next (weakly: it goes with the model). A chat is many short
# generations; learning the costs afresh in each (a plain step, a first draft,
# exploring lengths, probing) cost the demo model several percent of its speed.
_learned: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_MAX_LEARNED_PER_MODEL = 16
# Each learned DraftLength's round guard: the plain rounds' timings it keeps go with it.
_guards: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


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
    if not spec.adaptive:
        return new_draft_length(spec, adaptive=False)
    if isinstance(spec.draft, ExitPolicy):
        draft: object = (tuple(spec.draft.resolve(model.n_layer)), spec.draft.signal)
    else:
        draft = spec.draft if isinstance(spec.draft, str) else id(spec.draft)
    key = (draft, spec.max_draft, spec.max_lookup, spec.p_min, spec.draft_vocab, spec.ngram_min, spec.ngram_max)
    key += (spec.memory, spec.corpus, model.n_threads, greedy)
    try:
        per_model = _learned.setdefault(model, {})
    except TypeError:  # a model that takes no weak references learns per generation
        return new_draft_length(spec, adaptive=True)
    if key not in per_model and len(per_model) >= _MAX_LEARNED_PER_MODEL:
        per_model.clear()  # drafts made per request (new draft models) must not pile up
    return per_model.setdefault(key, new_draft_length(spec, adaptive=True))


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
    """generate_step's speculative twin: the backbone's tokens, several per forward.

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
    lengths = draft_length_for(model, spec, greedy)
    guard: RoundGuard = _guards.setdefault(lengths, RoundGuard(lengths.free_sources))
    guard.begin_request()
    stats.guard_rested, stats.round_times = guard.rested, guard.times
    sources = _sources(model, spec, lengths, stats)
    history = list(prompt_ids)
    for source in sources.values():
        source.begin(history)
    if "memory" in sources:
        stats.memory_tokens = memory_of(model).tokens
    state = grammar.start() if grammar is not None else None
    logits, cached_tokens = prefill(model, prompt_ids, route="backbone")
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
        start = model.n_past  # every token of `history` but the last is in the cache
        if start + 1 >= model.n_ctx:
            return
        tokens, verify_logits, state, dead_end = _round(
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
) -> tuple[list[int], np.ndarray, Optional[GrammarState], bool]:
    """One round of speculative_step after `history` (its last token not yet in the
    cache, which holds `start` positions): the tokens the grammar forces, drafts from
    the source and length `lengths` chooses, one backbone forward verifying them, and
    the tokens kept appended to `history`. Returns those tokens, the verify's logits
    (row j: the j-th token's), the grammar's state after them, and whether the
    grammar allows no token next (the generation ends after them)."""
    began = time.perf_counter()
    guard.start_round(began)
    forced, chosen, proposal, states, named = _draft(
        model, spec, sampler, sources, lengths, guard, history, state, start
    )
    base = len(forced)  # verify rows before the first draft's
    drafts = proposal.tokens
    drafted_at = time.perf_counter()

    # Verify: the last accepted token (after any forced ones) and the drafts in
    # one backbone forward.
    model.rewind(start)
    verify_logits = model.forward(history[start:] + drafts, route="backbone")
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

    model.rewind(start + base + len(new))
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
) -> tuple[list[int], str, Proposal, Optional[list[GrammarState]], dict[str, Draft]]:
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
    for name, source in sources.items():
        most = spec.max_lookup if isinstance(source, LookupDraft) else spec.max_draft
        available = source.available(history, most)
        if available:
            offer = _offer_name(name, source)
            offers[offer], named[offer] = available, source
    room = model.n_ctx - start - 1 - len(forced)
    chosen, k = lengths.choose(room, guard.allowed(offers) if spec.adaptive else offers)
    proposal = named[chosen].propose(history, k, sampler, spec.p_min, state) if k else Proposal()
    states = None
    if state is not None:
        states = _grammar_states(state, proposal.tokens)
        proposal.keep_first(len(states) - 1)
    return forced, chosen, proposal, states, named
