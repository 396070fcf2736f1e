"""Draft sources for lossless decoding, behind one interface: each proposes up to k
tokens continuing the accepted history, and the backbone verifies them
(river_cpp.decoding.acceptance).

- RiverDraft: the river (or River's own exits) on the backbone's shared cache.
- ModelDraft: a separate smaller model with its own cache.
- NgramDraft: the continuation of the context's last n-gram where it occurred before
  (prompt lookup); costs a dictionary probe, proposes only where the text repeats.
- RecallDraft: the continuation of the context's tail where it occurred outside the
  context: in earlier calls on the model (river_cpp.decoding.draft_memory) or in a
  corpus (river_cpp.decoding.draft_corpus); a lookup too.
"""

from __future__ import annotations

import time
from typing import Callable, Optional, Protocol, Sequence

import numpy as np

from river_cpp.decoding.acceptance import sample
from river_cpp.decoding.grammar import GrammarState
from river_cpp.decoding.ngram import NgramIndex
from river_cpp.decoding.sampling import NoLegalToken, Sampler
from river_cpp.decoding.steps import prefill
from river_cpp.decoding.suffix_index import match_bucket
from river_cpp.engine.compute.backbone import Backbone
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.engine.compute.requests import Forward, Requests, call, run_alone


def ngram_source(n: int) -> str:
    """The statistics' name of n-gram matches of n tokens offered at a round's start."""
    return f"ngram{n}"


def recall_source(kind: str, m: int) -> str:
    """The statistics' name of a `kind` ("memory", "corpus") match of m tokens, by its
    length's bucket (river_cpp.decoding.suffix_index.match_bucket)."""
    return f"{kind}{match_bucket(m)}"


def copy_source(n: int) -> str:
    """The statistics' name of n-gram matches of n tokens a river round copied midway."""
    return f"copy{n}"


class Proposal:
    """What a source drafted in one round: tokens, the forwards it ran, and `spans`:
    which source proposed which run of the tokens, in order, as (name, count). A
    river draft that copies a 3-token n-gram match midway has spans like
    [("river", 2), ("copy3", 6)]; the statistics credit each span to its source.
    `catch_up_seconds`: of the round's drafting time, what a separate draft spent
    bringing its own cache up to the history first (not a cost of the drafted tokens)."""

    __slots__ = ("tokens", "forwards", "spans", "catch_up_seconds")

    def __init__(self, tokens: Optional[list[int]] = None, source: str = "") -> None:
        self.tokens: list[int] = tokens or []
        self.forwards = 0
        self.spans: list[tuple[str, int]] = [(source, len(self.tokens))] if self.tokens else []
        self.catch_up_seconds = 0.0

    def add(self, source: str, tokens: Sequence[int]) -> None:
        self.tokens.extend(tokens)
        if self.spans and self.spans[-1][0] == source:
            self.spans[-1] = (source, self.spans[-1][1] + len(tokens))
        else:
            self.spans.append((source, len(tokens)))

    def keep_first(self, n: int) -> None:
        """Drop the drafted tokens after the first n (and their spans)."""
        del self.tokens[n:]
        spans, left = [], n
        for source, count in self.spans:
            if left > 0:
                spans.append((source, min(count, left)))
            left -= count
        self.spans = spans


class Draft(Protocol):
    """A draft source: begin() once per generation, then per round propose() and keep()."""

    def begin(self, history: Sequence[int]) -> None:
        """Called with the prompt before the first round."""
        ...

    def available(self, history: Sequence[int], max_tokens: int) -> int:
        """How many tokens it can propose after `history` this round (0: none)."""
        ...

    def propose(
        self, history: Sequence[int], k: int, sampler: Sampler, p_min: float, grammar: Optional[GrammarState] = None
    ) -> Requests:
        """Up to k tokens continuing `history`, as a request loop (river_cpp.engine.compute.requests)
        returning the Proposal: the river's forwards are the target sequence's requests;
        every other source asks it nothing. A forward draft ends the round after the
        first token whose top probability is below p_min (0: never). `grammar`: the
        state after `history`; a forward draft then drafts only tokens it allows (the
        loop cuts any draft at the first token the grammar forbids)."""
        ...

    def keep(self, history: Sequence[int]) -> None:
        """The round's accepted tokens are the end of `history` now."""
        ...


def top_probability(logits: np.ndarray) -> float:
    """The largest softmax probability of `logits` (temperature 1). The exponentials
    stay in float32 (each is at most 1) and only their sum is float64: over Qwen's
    152k logits that takes 0.2 ms, against 1 ms in float64, on a 35 ms river token."""
    return 1.0 / float(np.exp(logits - logits.max()).sum(dtype=np.float64))


def _advance(state: GrammarState, proposal: Proposal, start: int) -> bool:
    """Advance `state` past the tokens of `proposal` from `start` (those copied after
    the ones it has seen); at the first it forbids, drop it and the rest (False)."""
    for i in range(start, len(proposal.tokens)):
        if not state.allows(proposal.tokens[i]):
            proposal.keep_first(i)
            return False
        state.accept(proposal.tokens[i])
    return True


class _ForwardDraft:
    """A draft that runs a model's forward per token and samples from its logits: its
    drafting is a request loop on the sequence of the model it drafts with."""

    model: Backbone
    name: str

    def available(self, history: Sequence[int], max_tokens: int) -> int:
        return max_tokens

    def drafting(
        self, history: Sequence[int], k: int, sampler: Sampler, p_min: float, grammar: Optional[GrammarState] = None
    ) -> Requests:
        """propose's loop, its requests on the drafting model's sequence."""
        proposal = Proposal()
        state = grammar.clone() if grammar is not None else None
        # Each drafted token is the draft's sample with the draw its position will be
        # verified with, so that it is kept whenever the backbone samples the same.
        uniforms = sampler.peek(k)
        while len(proposal.tokens) < k:
            seen = len(proposal.tokens)
            if self._copy(proposal, k):
                if state is not None and not _advance(state, proposal, seen):
                    break
                continue
            context = list(history) + proposal.tokens
            n_past = yield call("n_past")
            logits = (yield self._forward(context[n_past:]))[0]
            proposal.forwards += 1
            try:
                dist = sampler.distribution(logits, context, state)
            except NoLegalToken:
                break
            token = sample(dist, uniforms[len(proposal.tokens)])
            proposal.add(self.name, [token])
            if state is not None:
                state.accept(token)
            # An unsure token ends the round but is still verified: it costs one more
            # verify position and no forward, and is kept as often as not (0.6-0.8
            # below a top probability of 0.5 on the recorded traces). Stopping before
            # it, as llama.cpp's draft p_min does, threw those away.
            if p_min > 0.0 and top_probability(logits) < p_min:
                break
        return proposal

    def _copy(self, proposal: Proposal, k: int) -> bool:
        """Extend `proposal` from elsewhere instead of a forward (whether it did)."""
        return False

    def _forward(self, ids: Sequence[int]) -> Forward:
        """The forward of one drafted position (its logits: row 0 of the result)."""
        raise NotImplementedError


class RiverDraft(_ForwardDraft):
    """The river drafting on the backbone's own cache, under an exit policy (every
    layer on the river: ExitPolicy.at_layer(0)). Its K/V rows are the ones the verify
    overwrites, so the target rewinds the shared cache itself.

    copies: n-gram matches the river may copy midway instead of running its layers.
    A round the river drafts may reach text the context already holds (a fresh
    sentence, then the pasted code again); copying the rest of the round costs
    nothing, where the river would spend a forward per token on it. copy_pays(name,
    n) says whether copying n tokens of a match named `name` ("copy3": of 3 tokens)
    beats the river for them (river_cpp.decoding.draft_length.DraftLength.copy_pays)."""

    name = "river"

    def __init__(
        self,
        model: Backbone,
        policy: ExitPolicy,
        vocab: Optional[int],
        copies: Optional[NgramDraft] = None,
        copy_pays: Optional[Callable[[str, int], bool]] = None,
    ) -> None:
        if not model.has_river:
            raise ValueError("drafting with the river needs a model with a river")
        self.model = model
        self.policy = policy
        self.vocab = None if vocab is None or vocab >= model.n_vocab else vocab
        self.copies = copies
        self.copy_pays = copy_pays or (lambda name, n: True)

    def begin(self, history: Sequence[int]) -> None:
        pass

    def _copy(self, proposal: Proposal, k: int) -> bool:
        if self.copies is None or not proposal.tokens:  # the round's first token: chosen already
            return False
        tokens, n = self.copies.index.propose(k - len(proposal.tokens), tail=proposal.tokens)
        if not tokens or not self.copy_pays(copy_source(n), len(tokens)):
            return False
        proposal.add(copy_source(n), tokens)
        return True

    def propose(
        self, history: Sequence[int], k: int, sampler: Sampler, p_min: float, grammar: Optional[GrammarState] = None
    ) -> Requests:
        return self.drafting(history, k, sampler, p_min, grammar)  # on the target's own sequence

    def _forward(self, ids: Sequence[int]) -> Forward:
        return Forward(ids, last_only=True, route="decode", policy=self.policy, exit_vocab=self.vocab)

    def keep(self, history: Sequence[int]) -> None:
        pass


class ModelDraft(_ForwardDraft):
    """A separate model with its own cache, drafting with its full weights."""

    name = "model"

    def __init__(self, model: Backbone, draft: Backbone) -> None:
        if draft is model:
            raise ValueError('a model cannot draft for itself: use draft="river"')
        if draft.n_vocab != model.n_vocab:
            raise ValueError(f"the draft's vocabulary ({draft.n_vocab}) differs from the model's ({model.n_vocab})")
        self.model = draft

    def begin(self, history: Sequence[int]) -> None:
        """Bring the draft's cache to the prompt (all of `history` but its last token,
        reusing what it holds) with the target's prefill, not inside the first round."""
        if len(history) > 1:
            prefill(self.model, history[:-1], route="backbone")

    def propose(
        self, history: Sequence[int], k: int, sampler: Sampler, p_min: float, grammar: Optional[GrammarState] = None
    ) -> Requests:
        """As every forward draft (run on the draft model at once: the target's
        sequence is asked nothing), after bringing the draft's cache up to the history
        in one batch, timed apart (Proposal.catch_up_seconds). After plain rounds the
        cache is behind by their tokens, and catching up is a cost of those rounds,
        not of the drafted tokens. Counted as the first drafted token's forward, it
        made the 0.5B's probes on the 1.5B's chat cost 0.7-1.6 plain steps a token
        against 0.16-0.19, and in two of four benchmark runs the draft then stayed at
        plain decoding to the end (docs/results.md)."""
        yield from ()  # the draft model's own cache is used at once, here
        start = time.perf_counter()
        behind = history[self.model.n_past : -1]
        if behind:
            self.model.forward(behind, last_only=True, route="backbone")
        caught_up = time.perf_counter() - start
        proposal = run_alone(self.model, self.drafting(history, k, sampler, p_min, grammar))
        proposal.catch_up_seconds = caught_up
        return proposal

    def _forward(self, ids: Sequence[int]) -> Forward:
        return Forward(ids, last_only=True, route="backbone")

    def keep(self, history: Sequence[int]) -> None:
        # Its cache may hold rejected drafts past the accepted history (all but the last token).
        self.model.rewind(min(len(history) - 1, self.model.n_past))


class LookupDraft:
    """A draft found by a lookup, free next to a forward and deterministic: available()
    finds `offer` and the name its statistics are kept under (`offer_name`), propose()
    hands it on. A round that drafts from another source still scores the offer
    against the tokens it emitted (DraftLength.observe_unused)."""

    def __init__(self) -> None:
        self.offer: list[int] = []
        self.offer_name = ""

    def propose(
        self, history: Sequence[int], k: int, sampler: Sampler, p_min: float, grammar: Optional[GrammarState] = None
    ) -> Requests:
        yield from ()  # a lookup asks the sequence nothing
        return Proposal(self.offer[:k], self.offer_name)


class NgramDraft(LookupDraft):
    """The context's own continuation: after the last n tokens (n_max down to n_min),
    the tokens that followed their most recent earlier occurrence. After available():
    `offer`, the tokens it found, and `last_n`, the size of the n-gram they follow
    (drafting statistics are kept per size: a 3-gram match is a better bet than a
    1-gram one)."""

    def __init__(self, n_min: int, n_max: int) -> None:
        super().__init__()
        self._n_min, self._n_max = n_min, n_max
        self.index = NgramIndex(n_min, n_max)
        self.last_n = 0

    def begin(self, history: Sequence[int]) -> None:
        self.index = NgramIndex(self._n_min, self._n_max)
        self.index.extend(history)

    def available(self, history: Sequence[int], max_tokens: int) -> int:
        self.offer, self.last_n = self.index.propose(max_tokens)
        self.offer_name = ngram_source(self.last_n)
        return len(self.offer)

    def keep(self, history: Sequence[int]) -> None:
        self.index.extend(history[len(self.index.tokens) :])


class RecallDraft(LookupDraft):
    """What followed the longest match of the context's tail in text outside the
    context: `lookup(history, max_tokens)` returns the tokens and the match's length.
    Statistics are kept per `kind` and match length (recall_source): a match of 16
    tokens is a better bet, and pays for a longer draft, than one of 2. `on_begin`
    and `on_keep` see the history as a generation begins and after each round (the
    memory keeps the running call's history to remember it)."""

    def __init__(
        self,
        kind: str,
        lookup: Callable[[Sequence[int], int], tuple[list[int], int]],
        on_begin: Optional[Callable[[list[int]], None]] = None,
        on_keep: Optional[Callable[[list[int]], None]] = None,
    ) -> None:
        super().__init__()
        self.kind = kind
        self._lookup = lookup
        self._on_begin = on_begin
        self._on_keep = on_keep

    def begin(self, history: Sequence[int]) -> None:
        if self._on_begin is not None:
            self._on_begin(history)

    def available(self, history: Sequence[int], max_tokens: int) -> int:
        self.offer, m = self._lookup(history, max_tokens)
        self.offer_name = recall_source(self.kind, m)
        return len(self.offer)

    def keep(self, history: Sequence[int]) -> None:
        if self._on_keep is not None:
            self._on_keep(history)
