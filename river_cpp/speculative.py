"""Lossless River: the river drafts tokens, the backbone verifies them in one batch.

A round feeds the last accepted token and up to N drafted ones through the backbone
in one forward with logits at every position, keeps the longest agreeing prefix
plus the backbone's own next token, and rewinds the cache past the rest. The river
drafts on the backbone's own KV cache: its K/V rows are overwritten by the
backbone's in the same slots, so after a round the cache holds exactly what a
backbone-only run would. The tokens are the backbone's: equal to its greedy
sequence at temperature 0, distributed as its samples otherwise (the standard
accept/reject and residual distribution; Leviathan et al. 2023, Chen et al. 2023).

This module is the second implementation of generation's token loop
(river_cpp.generation.generate_step); it owns drafting, verification and the
draft length, not text or stopping.
"""

from __future__ import annotations

import numbers
import time
import weakref
from collections import deque
from dataclasses import dataclass
from statistics import median
from typing import Iterator, Optional, Sequence, Union

import numpy as np

from river_cpp.generation import Step, prefill
from river_cpp.language_model import LanguageModel
from river_cpp.policy import ExitPolicy
from river_cpp.sampling import Sampler

DEFAULT_MAX_DRAFT = 8
DEFAULT_P_MIN = 0.0
# None: the river drafts from the whole vocabulary. A prefix pays less than it costs
# on Qwen2.5-Coder-0.5B (docs/results.md): its first 32768 ids skip 78% of the head
# (a quarter of the draft's bytes) but cover only 96% of HumanEval's tokens, and each
# token outside ends a round; at a fixed 4-token draft, acceptance fell from 0.93 to
# 0.79 (32768) and 0.87 (65536) for a 5-20% cheaper draft.
DEFAULT_DRAFT_VOCAB: Optional[int] = None


@dataclass(frozen=True)
class Speculative:
    """How to draft: which draft, at most how many tokens a round, when to stop early.

    draft: "river" (every layer on the river, sharing the backbone's cache), an
        ExitPolicy (River's own exits drafting, on the same cache), or another
        LanguageModel with the same vocabulary and its own cache (a smaller GGUF:
        classic speculative decoding; it drafts with its full weights).
    max_draft: most drafted tokens per round.
    p_min: stop drafting a round when the draft's most likely token has a lower
        probability (0: never stop early).
    adaptive: choose each round's length from the running acceptance and the
        measured costs of drafting and verifying (0 when drafting does not pay);
        False always drafts max_draft (or until p_min).
    draft_vocab: a river draft proposes only token ids below this (its head scores
        no others; RiverModel.exit_vocab); None: the whole vocabulary. The output
        stays the backbone's either way: a token the draft cannot propose is the
        backbone's own next token after a rejection.
    """

    draft: Union[str, ExitPolicy, LanguageModel] = "river"
    max_draft: int = DEFAULT_MAX_DRAFT
    p_min: float = DEFAULT_P_MIN
    adaptive: bool = True
    draft_vocab: Optional[int] = DEFAULT_DRAFT_VOCAB

    def __post_init__(self) -> None:
        if isinstance(self.draft, str) and self.draft != "river":
            raise ValueError(f'draft must be "river", an ExitPolicy or a model, got {self.draft!r}')
        if (
            isinstance(self.max_draft, bool)
            or not isinstance(self.max_draft, numbers.Integral)
            or not 1 <= self.max_draft <= 64
        ):
            raise ValueError(f"max_draft must be an integer in [1, 64], got {self.max_draft!r}")
        if isinstance(self.p_min, bool) or not isinstance(self.p_min, numbers.Real) or not 0.0 <= self.p_min < 1.0:
            raise ValueError(f"p_min must be a number in [0, 1), got {self.p_min!r}")
        if self.draft_vocab is not None and (
            isinstance(self.draft_vocab, bool)
            or not isinstance(self.draft_vocab, numbers.Integral)
            or self.draft_vocab < 1
        ):
            raise ValueError(f"draft_vocab must be None or a positive integer, got {self.draft_vocab!r}")


@dataclass
class SpeculativeStats:
    """Counts of one speculative generation."""

    rounds: int = 0  # backbone verify forwards
    drafted: int = 0  # tokens the draft proposed
    accepted: int = 0  # drafted tokens the backbone kept
    generated: int = 0  # tokens the rounds produced (accepted + the backbone's own)
    draft_forwards: int = 0  # single-token forwards of the draft
    draft_seconds: float = 0.0  # spent drafting (forwards and choosing the drafted tokens)
    verify_seconds: float = 0.0  # spent verifying (the backbone's forwards and the comparisons)

    @property
    def acceptance_rate(self) -> float:
        """Share of drafted tokens kept (0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_round(self) -> float:
        """Tokens produced per backbone forward (1.0 is plain decoding)."""
        return self.generated / self.rounds if self.rounds else 0.0

    def summary(self) -> str:
        return (
            f"speculative: {self.drafted} drafted, {self.accepted} accepted "
            f"({100 * self.acceptance_rate:.1f}%), {self.tokens_per_round:.2f} tokens per verify"
        )


# ---------------------------------------------------------------- drafts


class _SharedCacheDraft:
    """The river drafting on the backbone's own cache, under an exit policy."""

    def __init__(self, model: LanguageModel, policy: ExitPolicy, vocab: Optional[int]) -> None:
        if not getattr(model, "has_river", False):
            raise ValueError("speculative decoding with the river as draft needs a model with a river")
        self.model = model
        self._policy = policy
        self._vocab = None if vocab is None or vocab >= model.n_vocab else vocab
        self._saved = (model.policy, model.exit_vocab)

    def begin(self, history: Sequence[int]) -> None:
        self.model.policy = self._policy
        self.model.exit_vocab = self._vocab

    def end(self) -> None:
        self.model.policy, self.model.exit_vocab = self._saved

    @property
    def n_past(self) -> int:
        return self.model.n_past

    def forward(self, ids: Sequence[int]) -> np.ndarray:
        return self.model.forward(ids, last_only=True, route="decode")[0]

    def keep(self, n_past: int) -> None:
        """The target rewinds the shared cache itself."""


class _ModelDraft:
    """A separate model with its own cache, drafting with its full weights."""

    def __init__(self, model: LanguageModel, draft: LanguageModel) -> None:
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

    def end(self) -> None:
        pass

    @property
    def n_past(self) -> int:
        return self.model.n_past

    def forward(self, ids: Sequence[int]) -> np.ndarray:
        return self.model.forward(ids, last_only=True, route="backbone")[0]

    def keep(self, n_past: int) -> None:
        self.model.rewind(min(n_past, self.model.n_past))


def _draft_source(model: LanguageModel, spec: Speculative) -> Union[_SharedCacheDraft, _ModelDraft]:
    if isinstance(spec.draft, str):
        return _SharedCacheDraft(model, ExitPolicy.at_layer(0), spec.draft_vocab)
    if isinstance(spec.draft, ExitPolicy):
        return _SharedCacheDraft(model, spec.draft, spec.draft_vocab)
    return _ModelDraft(model, spec.draft)


# ---------------------------------------------------------------- draft length


class DraftLength:
    """Each round's draft length, from the running acceptance and measured costs.

    With per-token acceptance a, k drafted tokens yield (1 - a^(k+1)) / (1 - a)
    tokens on average and cost k drafts plus one verify of k+1 positions. Drafts
    and verifies are timed as they run (medians of recent rounds, per verify size),
    and the k with the most tokens per second wins; k = 0 is plain
    decoding, so a prompt the draft cannot follow falls back to it, trying a one-token
    draft now and then to notice when drafting pays again. Each probe that finds it
    still does not pay doubles the wait before the next: a probe costs more than the
    plain step it replaces, and on a model where drafting never pays, steady probing
    alone cost 3-4% of its speed.
    """

    _DECAY = 0.9  # weight of the past in the running acceptance, per drafting round
    _PLAIN_DECAY = 0.97  # ... and per plain round
    _WINDOW = 9  # recent timings kept per cost
    _FIRST_DRAFT = 2  # the first drafting round's length, which measures the draft's cost
    _PROBE_EVERY = 32  # rounds of plain decoding before the first probing draft
    _PROBE_EVERY_MAX = 128
    _PRIOR_ACCEPTANCE = 0.7
    # Draft only when it promises this much more speed than plain decoding: where the
    # two are close, the estimates' noise decides, and each wrong draft costs more than
    # a wrong plain step (the demo model lost 6-7% that way at a predicted break-even).
    _MIN_GAIN = 0.05
    _PRIOR_VERIFY_SLOPE = 0.25  # extra verify cost per position past those measured, relative to one
    _TRUSTED_TIMINGS = 3  # timings of a verify size before its median alone is its cost
    # Every decision weighs drafting against one position's verify, which only plain
    # rounds time: the first (and the first after a new graph is built) may include
    # building it, and a cost measured while the machine was slow would, if drafting
    # then looked good, never be timed again. So drafting starts after three such
    # timings, and a drafting stretch re-times one position every _RETIME_EVERY rounds
    # (in replays, at most 0.5% of the speed where drafting pays).
    _RETIME_EVERY = 32

    def __init__(self, max_draft: int, adaptive: bool) -> None:
        self.max_draft = max_draft
        self.adaptive = adaptive
        self._accepted = self._PRIOR_ACCEPTANCE  # decayed counts of accepted / offered drafts
        self._offered = 1.0
        # Recent timings; their medians are the costs, so that a stall of the machine
        # (another process, a page fault) does not switch drafting off or on.
        self._draft: deque[float] = deque(maxlen=self._WINDOW)  # seconds per drafted token
        self._verify: dict[int, deque[float]] = {}  # positions -> seconds per verify
        self._rounds = 0
        self._drafted_round = 0  # the last round that drafted
        self._timed_one_round = 0  # the last round that verified one position
        self._plain_rounds = 0
        self._probe_every = self._PROBE_EVERY

    @property
    def acceptance(self) -> float:
        return self._accepted / self._offered

    def next(self, room: int) -> int:
        """The draft length of the next round, at most `room`."""
        self._rounds += 1
        if not self.adaptive:
            return min(self.max_draft, room)
        if len(self._verify.get(1, ())) < self._TRUSTED_TIMINGS:
            k = 0  # plain steps first: the cost of one backbone token, which estimates rest on
        elif not self._draft:
            k = min(self._FIRST_DRAFT, self.max_draft)
        else:
            k = self._best_length()
            if k > 0 and self._rounds - self._timed_one_round > self._RETIME_EVERY:
                k = 0
            elif k > 0:
                self._plain_rounds, self._probe_every = 0, self._PROBE_EVERY
            else:
                self._plain_rounds += 1
                if self._plain_rounds >= self._probe_every:
                    k = 1
                    self._plain_rounds = 0
                    self._probe_every = min(2 * self._probe_every, self._PROBE_EVERY_MAX)
        return min(k, room)

    def observe(
        self, *, n_drafted: int, n_accepted: int, draft_seconds: float, verify_seconds: float, draft_forwards: int
    ) -> None:
        """Record one round."""
        if draft_forwards:
            self._draft.append(draft_seconds / draft_forwards)
        self._verify.setdefault(n_drafted + 1, deque(maxlen=self._WINDOW)).append(verify_seconds)
        if not n_drafted:
            self._timed_one_round = self._rounds
        else:
            # Offered: the accepted ones, plus the one rejected if the round stopped at a rejection.
            offered = n_accepted + (1 if n_accepted < n_drafted else 0)
            # The past fades with every round, so that a probe after a long plain stretch
            # speaks for the text as it is now; plain rounds fade it more slowly, or one
            # accepted probe alone sets the estimate near 1 and the next round drafts 8
            # tokens (on the demo model, where drafting never pays, that cost it several
            # percent of its speed; docs/results.md, "Lossless River").
            plain_rounds = self._rounds - self._drafted_round - 1
            fade = self._DECAY * self._PLAIN_DECAY**plain_rounds
            self._accepted = fade * self._accepted + n_accepted
            self._offered = fade * self._offered + offered
            self._drafted_round = self._rounds

    def _verify_costs(self, sizes: range) -> dict[int, float]:
        """Seconds to verify each of `sizes` positions: the more optimistic of two
        curves (_curve), one through every verified size's recent median, one through
        only the sizes verified at least _TRUSTED_TIMINGS times (and one position, which
        every estimate rests on). A first verify may meet a stall of the machine, and
        one slow timing must not rule its size out for good (replayed on a recorded
        0.5B HumanEval trace, that kept a run at plain decoding to its end); an
        optimistic guess is tried and then known. Computed once per decision."""
        medians = {size: median(times) for size, times in sorted(self._verify.items())}
        trusted = {
            size: cost
            for size, cost in medians.items()
            if size == 1 or len(self._verify[size]) >= self._TRUSTED_TIMINGS
        }
        every, sure = self._curve(medians, sizes), self._curve(trusted, sizes)
        return {n: min(every[n], sure[n]) for n in sizes}

    def _curve(self, medians: dict[int, float], sizes: range) -> dict[int, float]:
        """Verify seconds of `sizes` from the medians of some measured sizes (sorted,
        1 among them): a measured size costs its median; between two, the line joining
        them; past the largest, its cost plus an optimistic slope per position (the
        smaller of _PRIOR_VERIFY_SLOPE and the last measured step). Measured curves
        step and flatten (2 positions cost 1.6-1.8x one, 5 barely more than 3 on the
        0.5B model): a line fitted through the small sizes overstated the long ones, so
        they were never tried."""
        known = list(medians)
        slope = self._PRIOR_VERIFY_SLOPE * medians[1]
        if len(known) > 1:  # the last measured step, where it is smaller
            step = (medians[known[-1]] - medians[known[-2]]) / (known[-1] - known[-2])
            slope = min(slope, max(step, 0.0))
        costs = {}
        for n in sizes:
            if n in medians:
                costs[n] = medians[n]
            elif n > known[-1]:
                costs[n] = medians[known[-1]] + slope * (n - known[-1])
            else:
                lo = max(k for k in known if k < n)
                hi = min(k for k in known if k > n)
                costs[n] = medians[lo] + (medians[hi] - medians[lo]) * (n - lo) / (hi - lo)
        return costs

    def _best_length(self) -> int:
        a = min(self.acceptance, 0.999)
        draft_seconds = median(self._draft)
        verify = self._verify_costs(range(1, self.max_draft + 2))
        best_k, best_rate = 0, (1.0 + self._MIN_GAIN) / verify[1]
        # Explore at most twice the longest draft verified so far: a guessed cost past it
        # is optimistic, and a wrong guess of 8 drafts cost the demo model 7 tokens' time.
        longest = max(self._verify) - 1
        for k in range(1, min(self.max_draft, max(2, 2 * longest)) + 1):
            expected = (1 - a ** (k + 1)) / (1 - a)
            rate = expected / (k * draft_seconds + verify[k + 1])
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k


# What each model has learned of its drafts' costs and acceptance, kept from one
# generation to the next (weakly: it goes with the model). A chat is many short
# generations; learning the costs afresh in each (a plain step, a first draft,
# exploring lengths, probing) cost the demo model several percent of its speed.
_learned: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_MAX_LEARNED_PER_MODEL = 16


def draft_length_for(model: LanguageModel, spec: Speculative, greedy: bool) -> DraftLength:
    """The DraftLength that `model` keeps for drafting as `spec` says (a new one for a
    fixed length): per draft, draft length, thread count, and greedy or sampled."""
    if not spec.adaptive:
        return DraftLength(spec.max_draft, adaptive=False)
    if isinstance(spec.draft, ExitPolicy):
        draft: object = (tuple(spec.draft.resolve(model.n_layer)), spec.draft.signal)
    else:
        draft = spec.draft if isinstance(spec.draft, str) else id(spec.draft)
    key = (draft, spec.max_draft, spec.p_min, spec.draft_vocab, getattr(model, "n_threads", None), greedy)
    try:
        per_model = _learned.setdefault(model, {})
    except TypeError:  # a model that takes no weak references learns per generation
        return DraftLength(spec.max_draft, adaptive=True)
    if key not in per_model and len(per_model) >= _MAX_LEARNED_PER_MODEL:
        per_model.clear()  # drafts made per request (new draft models) must not pile up
    return per_model.setdefault(key, DraftLength(spec.max_draft, adaptive=True))


# ---------------------------------------------------------------- the loop


def _top_probability(logits: np.ndarray) -> float:
    """The largest softmax probability of `logits` (temperature 1)."""
    top = float(logits.max())
    return 1.0 / float(np.exp(logits.astype(np.float64) - top).sum())


def _dense(ids: np.ndarray, probs: np.ndarray, n_vocab: int) -> np.ndarray:
    out = np.zeros(n_vocab, dtype=np.float64)
    out[ids] = probs
    return out


def _draw_residual(sampler: Sampler, target: np.ndarray, draft: np.ndarray) -> int:
    """After a rejection: a draw from max(target - draft, 0), normalized."""
    residual = np.maximum(target - draft, 0.0)
    support = np.flatnonzero(residual)
    if support.size == 0:  # target == draft: the rejection had probability 0
        support = np.flatnonzero(target)
        return sampler.draw(support, target[support] / target[support].sum())
    return sampler.draw(support, residual[support] / residual[support].sum())


def speculative_step(
    model: LanguageModel,
    prompt_ids: Sequence[int],
    sampler: Sampler,
    spec: Speculative,
    stats: Optional[SpeculativeStats] = None,
) -> Iterator[Step]:
    """generate_step's speculative twin: the backbone's tokens, several per forward.

    The prompt runs the full backbone. Each yielded Step carries the backbone's
    logits at that position and exit layer n_layer (every token is verified).
    """
    if not isinstance(sampler, Sampler):
        raise TypeError("speculative decoding needs a river_cpp.sampling.Sampler (it compares distributions)")
    stats = stats if stats is not None else SpeculativeStats()
    draft = _draft_source(model, spec)
    greedy = sampler.params.temperature == 0.0
    n_layer, n_vocab = model.n_layer, model.n_vocab
    lengths = draft_length_for(model, spec, greedy)
    history = list(prompt_ids)
    draft.begin(history)
    try:
        logits = prefill(model, prompt_ids, route="backbone")
        token = sampler(logits, history)
        history.append(token)
        yield Step(token, logits, n_layer)
        while True:
            start = model.n_past  # every token of `history` but the last is in the cache
            if start + 1 >= model.n_ctx:
                return
            k = lengths.next(room=model.n_ctx - start - 1)

            # Draft up to k tokens (the shared river writes rows start.. that the verify overwrites).
            began = time.perf_counter()
            drafts: list[int] = []
            draft_dists: list[np.ndarray] = []
            forwards = 0
            while len(drafts) < k:
                draft_logits = draft.forward((history + drafts)[draft.n_past :])
                forwards += 1
                if spec.p_min > 0.0 and _top_probability(draft_logits) < spec.p_min:
                    break
                ids, probs = sampler.distribution(draft_logits, history + drafts)
                drafts.append(sampler.draw(ids, probs))
                if not greedy:
                    draft_dists.append(_dense(ids, probs, n_vocab))
            drafted_at = time.perf_counter()

            # Verify: the last accepted token and the drafts in one backbone forward.
            model.rewind(start)
            verify_logits = model.forward([history[-1]] + drafts, route="backbone")
            new: list[int] = []
            for j, drafted in enumerate(drafts):
                ids, probs = sampler.distribution(verify_logits[j], history + new)
                if greedy:
                    if int(ids[0]) != drafted:
                        new.append(int(ids[0]))
                        break
                else:
                    target = _dense(ids, probs, n_vocab)
                    if sampler.uniform() * draft_dists[j][drafted] >= target[drafted]:
                        new.append(_draw_residual(sampler, target, draft_dists[j]))
                        break
                new.append(drafted)
            else:
                ids, probs = sampler.distribution(verify_logits[len(drafts)], history + new)
                new.append(sampler.draw(ids, probs))
            verified_at = time.perf_counter()

            n_accepted = len(new) - 1
            model.rewind(start + len(new))
            draft.keep(start + len(new))
            lengths.observe(
                n_drafted=len(drafts),
                n_accepted=n_accepted,
                draft_seconds=drafted_at - began,
                verify_seconds=verified_at - drafted_at,
                draft_forwards=forwards,
            )
            stats.rounds += 1
            stats.drafted += len(drafts)
            stats.accepted += n_accepted
            stats.generated += len(new)
            stats.draft_forwards += forwards
            stats.draft_seconds += drafted_at - began
            stats.verify_seconds += verified_at - drafted_at
            for j, token in enumerate(new):
                history.append(token)
                yield Step(token, verify_logits[j], n_layer)
    finally:
        draft.end()
