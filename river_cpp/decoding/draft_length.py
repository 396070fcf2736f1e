"""How much to draft each round, and from which source: the adaptive draft length.

A round of k drafted tokens is weighed by river_cpp.engine.decisions.round_cost (what it yields
at an acceptance, against k drafts plus one verify of k+1 positions). Drafts and verifies
are timed as they run (medians of recent rounds, per verify size); each round takes
the source and the k with the most tokens per second, where k = 0 is plain decoding.
The verify costs are the backbone's and shared by every source; acceptance and the
cost of a drafted token are each source's own (the river's is a forward of its
layers, an n-gram's a dictionary probe). So a prompt no source can follow falls
back to plain decoding, trying a one-token draft now and then to notice when
drafting pays again. Each probe that finds it still does not pay doubles the wait
before the next: a probe costs more than the plain step it replaces, and on a model
where drafting never pays, steady probing alone cost 3-4% of its speed.

A free source (an n-gram match) needs neither probes nor a first trial: the tokens a
round emits are the backbone's whatever drafted them, so an offer the round did not
use is scored against them for nothing (observe_unused), and its estimate follows the
text every round.

The estimates are too high exactly when they are acted on: a round drafts because an
estimate is high, and it is high as often by luck (one accepted probe) as by the text.
Where drafting barely pays even at full acceptance, that alone made it lose, so each
source also has a loss budget: it drafts only while its rounds' winnings against plain
decoding, plus 1% of all the time spent, stay positive. A source that pays keeps its
budget full; one that never does costs about 1% of the time plus its starting budget.
"""

from __future__ import annotations

from collections import deque
from statistics import median
from typing import Mapping, Optional, Sequence

from river_cpp.engine.decisions.round_cost import expected_accepted, round_rate

PLAIN = "plain"  # the source of a round that drafts nothing


class VerifyCosts:
    """Recent timings of the backbone verifying n positions, and the curve through them."""

    _WINDOW = 9  # recent timings kept per size
    _PRIOR_SLOPE = 0.25  # extra verify cost per position past those measured, relative to one
    _TRUSTED_TIMINGS = 3  # timings of a size before its median alone is its cost

    def __init__(self) -> None:
        self._times: dict[int, deque[float]] = {}

    def observe(self, positions: int, seconds: float) -> None:
        self._times.setdefault(positions, deque(maxlen=self._WINDOW)).append(seconds)

    def timings(self, positions: int) -> int:
        """How many recent timings of `positions` there are."""
        return len(self._times.get(positions, ()))

    def median(self, positions: int) -> float:
        """The median of the recent timings of `positions` (0.0 if none)."""
        times = self._times.get(positions)
        return median(times) if times else 0.0

    @property
    def longest(self) -> int:
        """The most positions verified so far."""
        return max(self._times)

    def costs(self, sizes: range) -> dict[int, float]:
        """Seconds to verify each of `sizes` positions: the more optimistic of two
        curves (_curve), one through every verified size's recent median, one through
        only the sizes verified at least _TRUSTED_TIMINGS times (and one position, which
        every estimate rests on). A first verify may meet a stall of the machine, and
        one slow timing must not rule its size out for good (replayed on a recorded
        0.5B HumanEval trace, that kept a run at plain decoding to its end); an
        optimistic guess is tried and then known. Computed once per decision."""
        medians = {size: median(times) for size, times in sorted(self._times.items())}
        trusted = {
            size: cost for size, cost in medians.items() if size == 1 or len(self._times[size]) >= self._TRUSTED_TIMINGS
        }
        every, sure = self._curve(medians, sizes), self._curve(trusted, sizes)
        return {n: min(every[n], sure[n]) for n in sizes}

    def _curve(self, medians: dict[int, float], sizes: range) -> dict[int, float]:
        """Verify seconds of `sizes` from the medians of some measured sizes (sorted,
        1 among them): a measured size costs its median; between two, the line joining
        them; past the largest, its cost plus an optimistic slope per position (the
        smaller of _PRIOR_SLOPE and the last measured step). Measured curves step and
        flatten (2 positions cost 1.6-1.8x one, 5 barely more than 3 on the 0.5B
        model): a line fitted through the small sizes overstated the long ones, so
        they were never tried."""
        known = list(medians)
        slope = self._PRIOR_SLOPE * medians[1]
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


class SourceEstimate:
    """One draft source's running acceptance and cost per drafted token."""

    _DECAY = 0.9  # weight of the past in the running acceptance, per round that scored its drafts
    _PLAIN_DECAY = 0.97  # ... and per round that did not
    _WINDOW = 9
    _PRIOR_ACCEPTANCE = 0.7

    def __init__(self) -> None:
        self._accepted = self._PRIOR_ACCEPTANCE  # decayed counts of accepted / offered drafts
        self._offered = 1.0
        self.draft: deque[float] = deque(maxlen=self._WINDOW)  # seconds per drafted token
        self.scored_round = 0  # the last round that scored its drafts (0: none yet)

    @property
    def acceptance(self) -> float:
        return self._accepted / self._offered

    @property
    def evidence(self) -> float:
        """How many tested tokens the acceptance rests on, faded (the prior counts 1)."""
        return self._offered

    def observe(self, round_: int, offered: int, accepted: int, draft_seconds: float, forwards: int) -> None:
        """One round's drafts of this source: `offered` of them tested by the verify
        (the accepted ones, and the one rejected if the rejection fell on this source)."""
        if forwards:
            self.draft.append(draft_seconds / forwards)
        # The past fades with every round, so that a probe after a long plain stretch
        # speaks for the text as it is now; rounds without this source fade it more
        # slowly, or one accepted probe alone sets the estimate near 1 and the next round
        # drafts 8 tokens (on the demo model, where drafting never pays, that cost it
        # several percent of its speed; docs/results.md, "Lossless River").
        fade = self._DECAY * self._PLAIN_DECAY ** max(round_ - self.scored_round - 1, 0)
        self._accepted = fade * self._accepted + accepted
        self._offered = fade * self._offered + offered
        self.scored_round = round_


def unused_offer_tested(proposed: int, agreeing: int, emitted: int) -> tuple[int, int]:
    """(offered, accepted) of an offer no round drafted: `proposed` tokens whose first
    `agreeing` equal the tokens the round emitted, `emitted` of them. Each emitted
    token tests the offer's token at its position as a verify would have (a drafted
    token is kept exactly when it is the token the backbone emits there, greedy or
    sampled: river_cpp.decoding.acceptance), up to the first disagreement; offer tokens past
    the emitted ones are untested.

    >>> unused_offer_tested(8, 2, 5)  # the third token disagreed
    (3, 2)
    >>> unused_offer_tested(8, 1, 1)  # a plain round tests one token
    (1, 1)
    """
    known = min(proposed, emitted)
    accepted = min(agreeing, known)
    return accepted + (1 if accepted < known else 0), accepted


def drafts_by_source(spans: Sequence[tuple[str, int]], n_accepted: int) -> dict[str, tuple[int, int]]:
    """source -> (offered, accepted) of one round whose drafts came in `spans` (source,
    count) and whose first n_accepted drafts were kept: each drafted token up to the
    first rejection counts for its source, the rejected one as offered and not
    accepted; the verify never tested those after it.

    >>> drafts_by_source([("river", 2), ("ngram3", 6), ("river", 1)], 4)
    {'river': (2, 2), 'ngram3': (3, 2)}
    """
    tested: dict[str, tuple[int, int]] = {}
    left = n_accepted
    for source, count in spans:
        accepted = min(count, left)
        offered = accepted + (1 if accepted < count else 0)
        before = tested.get(source, (0, 0))
        tested[source] = (before[0] + offered, before[1] + accepted)
        left -= accepted
        if accepted < count:
            break
    return tested


class DraftLength:
    """Each round's draft source and length, from the running acceptance and measured costs.

    choose() takes the sources on offer this round with the most tokens each can
    draft (an n-gram match proposes a few; the river any number) and returns the
    best (source, k); observe() records the round.
    """

    _FIRST_DRAFT = 2  # the first drafting round's length, which measures a costly source's cost
    _PROBE_EVERY = 32  # rounds of plain decoding before the first probing draft
    _PROBE_EVERY_MAX = 128
    # Draft only when it promises this much more speed than plain decoding: where the
    # two are close, the estimates' noise decides, and each wrong draft costs more than
    # a wrong plain step (the demo model lost 6-7% that way at a predicted break-even).
    _MIN_GAIN = 0.05
    _TRUSTED_TIMINGS = VerifyCosts._TRUSTED_TIMINGS
    # Every decision weighs drafting against one position's verify, which only plain
    # rounds time: the first (and the first after a new graph is built) may include
    # building it, and a cost measured while the machine was slow would, if drafting
    # then looked good, never be timed again. So drafting starts after three such
    # timings, and a drafting stretch re-times one position every _RETIME_EVERY rounds
    # (in replays, at most 0.5% of the speed where drafting pays).
    _RETIME_EVERY = 32
    # A loss budget per source, in one-position verifies: a source may draft (or be
    # probed) only while what its rounds won against plain decoding, plus a share of all
    # the time spent, stays positive. Where drafting pays, the winnings keep it open;
    # where it never does, exploring it costs at most _BUDGET_SHARE of the time (the
    # demo model's estimates, too high exactly when acted on, lost it 3-5% on chat).
    # A free source is drafted only once its estimate rests on this many tested tokens
    # (faded; the prior counts 1): waiting costs nothing, as its offers are scored every
    # round anyway, while a bet on one agreeing token (an estimate of 0.86) drafted 4-6
    # tokens that were all rejected, several times a run on the 1.5B Q8_0's chat.
    _FREE_EVIDENCE = 3.0
    _BUDGET_SHARE = 0.01
    _BUDGET_START = 8.0  # room for the first rounds of a new source
    _BUDGET_MOST = 64.0  # winnings kept: a source that has paid may lose this much before it rests

    def __init__(
        self,
        max_draft: int,
        adaptive: bool,
        *,
        free_sources: frozenset[str] = frozenset(),
        ends_unsure: bool = False,
        max_free: Optional[int] = None,
    ) -> None:
        """max_draft: the most tokens a costly source drafts a round; max_free: a free
        one (None: max_draft). free_sources: sources whose drafting costs nothing
        worth timing (n-gram lookups): they need no first measuring draft and no
        probes (observe_unused scores the offers a round does not draft). ends_unsure:
        the costly sources end a round after a token they are unsure of
        (Speculative.p_min), so a round of theirs is given the length that pays at
        full acceptance (_sure_length)."""
        self.max_draft = max_draft
        self.max_free = max_draft if max_free is None else max_free
        self.adaptive = adaptive
        self.free_sources = free_sources
        self.ends_unsure = ends_unsure
        self.verify = VerifyCosts()
        self.sources: dict[str, SourceEstimate] = {}
        self.budget: dict[str, float] = {}  # costly source or "free" -> its loss budget (in one-position verifies)
        self._rounds = 0
        self._timed_one_round = 0  # the last round that verified one position
        self._plain_rounds = 0
        self._probe_every = self._PROBE_EVERY
        self._rate = 0.0  # tokens per second the latest choice expected

    def estimate(self, source: str) -> SourceEstimate:
        return self.sources.setdefault(source, SourceEstimate())

    @property
    def acceptance(self) -> float:
        """The single-source acceptance (the first source seen; the prior before any)."""
        return next(iter(self.sources.values()), SourceEstimate()).acceptance

    def choose(self, room: int, offers: Mapping[str, int]) -> tuple[str, int]:
        """(source, k) of the next round: `offers` maps each source that can draft this
        round to the most tokens it can propose; k = 0 (source PLAIN) is plain decoding.
        At most `room` tokens."""
        self._rounds += 1
        offers = {source: min(limit, self._most(source), room) for source, limit in offers.items() if limit > 0}
        if self.adaptive:
            offers = {source: limit for source, limit in offers.items() if self._has_budget(source)}
        if not offers or room <= 0:
            return self._plain()
        if not self.adaptive:
            source = next(iter(offers))
            return source, offers[source]
        if self.verify.timings(1) < self._TRUSTED_TIMINGS:
            return self._plain()  # the cost of one backbone token, which estimates rest on
        for source, limit in offers.items():
            if source not in self.free_sources and not self.estimate(source).draft:
                return source, min(self._FIRST_DRAFT, limit)  # its cost, measured
        (source, k), closest = self._best(offers)
        if k > 0 and self._rounds - self._timed_one_round > self._RETIME_EVERY:
            return self._plain()
        if k > 0:
            self._plain_rounds, self._probe_every = 0, self._PROBE_EVERY
            return source, k
        self._plain_rounds += 1
        if self._plain_rounds >= self._probe_every:
            self._plain_rounds = 0
            self._probe_every = min(2 * self._probe_every, self._PROBE_EVERY_MAX)
            # The costly source closest to paying (free ones are scored every round
            # without drafting): probing whichever was offered first let a river whose
            # estimate had sunk go unprobed while n-gram matches were offered.
            if closest:
                return closest, 1
        return PLAIN, 0

    def _plain(self) -> tuple[str, int]:
        return PLAIN, 0

    def _most(self, source: str) -> int:
        """The most tokens `source` may draft in a round."""
        return self.max_free if source in self.free_sources else self.max_draft

    def _best(self, offers: Mapping[str, int]) -> tuple[tuple[str, int], str]:
        """The (source, k) with the most tokens per second (PLAIN, 0 unless one beats
        plain decoding by _MIN_GAIN), and the costly source that came closest ("" if
        none was offered, or none could pay even if every drafted token were kept, at
        a cost timed three times: a probe cannot find such a source paying, only cost
        a round; a 4-bit river on a 4-bit backbone, whose drafted token costs about a
        plain step)."""
        verify = self.verify.costs(range(1, max(self.max_draft, self.max_free) + 2))
        best: tuple[str, int] = (PLAIN, 0)
        best_rate = plain_rate = (1.0 + self._MIN_GAIN) / verify[1]
        # Explore at most twice the longest draft verified so far: a guessed cost past it
        # is optimistic, and a wrong guess of 8 drafts cost the demo model 7 tokens' time.
        explore = max(2, 2 * (self.verify.longest - 1))
        closest, closest_rate = "", 0.0
        for source, limit in offers.items():
            estimate = self.estimate(source)
            if source in self.free_sources and estimate.evidence < self._FREE_EVIDENCE:
                continue  # scored for nothing meanwhile (observe_unused): no bet on the prior or one token
            draft_seconds = median(estimate.draft) if estimate.draft else 0.0
            for k in range(1, min(limit, explore) + 1):
                # the kept drafts and the backbone's own token after them
                rate = round_rate(estimate.acceptance, k, draft_seconds, verify[k + 1])
                if rate > best_rate:
                    best, best_rate = (source, k), rate
                # every draft kept; known only once its cost rests on several timings (a
                # first one may meet a stall, and a source never probed is never re-timed)
                ceiling = (k + 1) / (k * draft_seconds + verify[k + 1])
                hopeless = len(estimate.draft) >= self._TRUSTED_TIMINGS and ceiling <= plain_rate
                if rate > closest_rate and source not in self.free_sources and not hopeless:
                    closest, closest_rate = source, rate
        self._rate = best_rate
        source, k = best
        if k and self.ends_unsure and source not in self.free_sources:
            draft_seconds = median(self.estimate(source).draft)
            best = source, max(k, self._sure_length(min(offers[source], explore), draft_seconds, verify))
        return best, closest

    def _sure_length(self, limit: int, draft_seconds: float, verify: Mapping[int, float]) -> int:
        """The draft length, at most `limit`, with the most tokens per second if every
        drafted token were kept, over the lengths whose verify was timed at least
        _TRUSTED_TIMINGS times (0 if none was). With a draft that ends its round after
        an unsure token, the tokens a longer round adds are the sure ones, and those
        are kept at 0.98-1.0 (top probability 0.5 and above, on every recorded trace):
        the running acceptance, which the unsure tokens pull down, would stop a round
        short of where the verify curve steps (5 on the 1.5B's, against the 2 or 3 the
        i.i.d. estimate chose). In replays that took the 1.5B's HumanEval from 1.59 to
        1.70 (docs/results.md)."""
        timed = [k for k in range(1, limit + 1) if self.verify.timings(k + 1) >= self._TRUSTED_TIMINGS]
        return max(timed, key=lambda k: (1 + k) / (k * draft_seconds + verify[k + 1]), default=0)

    def copy_pays(self, source: str, n: int) -> bool:
        """Whether a river round should copy n tokens of an n-gram match instead of
        drafting them: the tokens the river's better acceptance would add, against its n
        forwards' time at the latest chosen speed. `source` names the copies' own
        statistics ("copy3": matches of 3 tokens met inside river rounds, which fare
        otherwise than matches at a round's start, the "ngram3" offers)."""
        river, match = self.estimate("river"), self.estimate(source)
        if not river.draft:
            return True
        lost = expected_accepted(river.acceptance, n) - expected_accepted(match.acceptance, n)
        return lost <= self._rate * n * median(river.draft)

    def _budget_of(self, source: str) -> str:
        """The budget a source draws on: the free sources share one (each n-gram size
        with a budget of its own would multiply the room given to new sources)."""
        return "free" if source in self.free_sources else source

    def _has_budget(self, source: str) -> bool:
        return self.budget.get(self._budget_of(source), self._BUDGET_START) > 0

    def _charge(self, source: str, n_drafted: int, n_accepted: int, forwards: int, seconds: float) -> None:
        """Every budget earns its share of the round's time; a drafting round's source
        is charged what its tokens fell short of the plain steps its cost would buy
        (its forwards, copied tokens costing none, and the verify).
        The cost is the one decisions use (median draft, the verify curve), not the
        round's own timing: the time was predicted right where the estimates were
        not, and one stalled verify must not rest a source that pays. (A size verified
        three times or more costs its median on that curve, so only a size's first
        two verifies are priced optimistically.)"""
        one = self.verify.median(1)
        if not one:
            return
        for name in self.budget:
            self.budget[name] += self._BUDGET_SHARE * seconds / one
        if n_drafted:
            draft = self.estimate(source).draft
            cost = (
                forwards * (median(draft) if draft else 0.0)
                + self.verify.costs(range(n_drafted + 1, n_drafted + 2))[n_drafted + 1]
            )
            name = self._budget_of(source)
            budget = self.budget.get(name, self._BUDGET_START) + n_accepted + 1 - cost / one
            self.budget[name] = min(budget, self._BUDGET_MOST)

    def observe_unused(self, source: str, proposed: int, agreeing: int, emitted: int) -> None:
        """Score a free source's offer that this round did not draft against the
        tokens the round emitted (unused_offer_tested); call after observe()."""
        offered, accepted = unused_offer_tested(proposed, agreeing, emitted)
        self.estimate(source).observe(self._rounds, offered, accepted, 0.0, 0)

    def observe(
        self,
        *,
        n_drafted: int,
        n_accepted: int,
        draft_seconds: float,
        verify_seconds: float,
        draft_forwards: int,
        source: Optional[str] = None,
        spans: Optional[Sequence[tuple[str, int]]] = None,
    ) -> None:
        """Record one round (`source`: the one that drafted, None for a single-source
        controller, whose source is "river"; `spans`: which source drafted which of
        the tokens, where more than one did)."""
        self.verify.observe(n_drafted + 1, verify_seconds)
        if not n_drafted:
            self._timed_one_round = self._rounds
            self._charge(PLAIN, 0, 0, 0, draft_seconds + verify_seconds)
            return
        source = source or "river"
        for name, (offered, accepted) in drafts_by_source(spans or [(source, n_drafted)], n_accepted).items():
            timed = name == source  # the drafting time is the round's source's
            self.estimate(name).observe(
                self._rounds, offered, accepted, draft_seconds if timed else 0.0, draft_forwards if timed else 0
            )
        self._charge(source, n_drafted, n_accepted, draft_forwards, draft_seconds + verify_seconds)
