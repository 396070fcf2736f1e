"""A request's guard against drafts that lose: each round's whole wall time, by the
source that drafted it, against the plain rounds' time per token.

DraftLength prices a round from its parts (the median draft, the verify curve), so what
a round costs beyond them (sampling every verified row, a source's lookups, the tokens'
way to the caller) and a verify curve that steps where it guessed a line go unseen; on a
copying task, 24-token lookups verified at a few tokens each ran the 1.5B Q4_K_M at
0.71-0.91x of plain (issue 41). The guard sees only the clock: a round from its start
to the next round's start, so everything it caused is in it. A source whose recent
rounds (faded) lost more than _LOSS_STEPS plain steps rests for a while, doubling each
time it rests again in the same request; so does drafting as a whole (ALL) when the
request's drafted rounds together lose that much, since each of a dozen sources (n-gram
sizes, memory buckets) losing its own two steps before it rests would add up.

A lookup (an n-gram match, a recalled one) also has a reach within the request: it may
draft at most _FIRST_REACH tokens until its rounds are kept whole; the reach doubles
with each round kept whole and halves with each round rejected before half of it (a
quote that departs from its source now and then keeps most of its reach). A lookup's
estimate is the model's, learned over earlier requests, and a 6-token match that copied
a whole answer before may meet text that goes its own way: on the 1.5B Q4_K_M (2
threads, a verify of n positions about 0.45 n plain steps), rounds of 12-19 drafts
keeping one or two lost 4-10 steps each, three rounds a request before the rests caught
them (0.76-0.88x of plain on 3 of 16 input-grounded answers). With the reach, a
request's first rejected round costs at most a verify of _FIRST_REACH + 1 positions,
and a copying stretch reaches 24-token rounds after three rounds (docs/results.md,
"The guard against drafts that lose").

It decides nothing else; DraftLength still chooses among the sources it leaves on offer,
and the length within their limits. The rounds it timed, plain and drafted, are also
the request's own estimate of its speed against plain decoding (RoundTimes).
"""

from __future__ import annotations

from collections import deque
from dataclasses import astuple, dataclass
from statistics import median
from typing import AbstractSet, Mapping, Optional

from river_cpp.decoding.draft_length import PLAIN

ALL = "*"  # the guard's name for every source together


@dataclass
class RoundTimes:
    """One request's whole rounds as the guard timed them: tokens and seconds of the
    plain rounds and of the drafted ones (the last round, still open when the request
    ends, is in neither)."""

    plain_rounds: int = 0
    plain_tokens: int = 0
    plain_seconds: float = 0.0
    drafted_tokens: int = 0
    drafted_seconds: float = 0.0

    MIN_PLAIN_ROUNDS = 2  # plain rounds an estimate needs

    def speedup(self) -> Optional[float]:
        """The request's speed over plain decoding, estimated: its tokens at the plain
        rounds' own seconds per token, over the time its rounds took. Plain decoding
        would have run every token as a plain round; a drafted round costs a verify and
        its drafting, whatever it kept. None without MIN_PLAIN_ROUNDS plain rounds to
        price a token (every round drafted) or without a drafted round (nothing to
        compare)."""
        if self.plain_rounds < self.MIN_PLAIN_ROUNDS or min(self.plain_seconds, self.drafted_seconds) <= 0:
            return None
        per_token = self.plain_seconds / self.plain_tokens
        return per_token * (self.plain_tokens + self.drafted_tokens) / (self.plain_seconds + self.drafted_seconds)

    def __add__(self, other: RoundTimes) -> RoundTimes:
        """Both requests' rounds together (a chat's turns, for its estimate over the conversation)."""
        return RoundTimes(*(a + b for a, b in zip(astuple(self), astuple(other))))


class RoundGuard:
    """Wall time of whole rounds per source, against plain rounds, for one model.

    The plain rounds' timings are kept from request to request (a chat is many short
    requests, and the plain step is the model's on this host); the losses and rests
    start afresh with each request (begin_request).
    """

    _WINDOW = 9  # recent plain rounds kept
    _MIN_PLAIN = 2  # plain rounds timed before any source is judged
    _DECAY = 0.8  # weight of a source's past rounds in its running loss
    _LOSS_STEPS = 2.0  # running loss, in plain steps, that rests a source
    _REST_ROUNDS = 16  # rounds a source rests the first time in a request
    _FIRST_REACH = 4  # most tokens a lookup drafts in a request before its rounds are kept whole

    def __init__(self, lookups: AbstractSet[str] = frozenset()) -> None:
        """lookups: the sources whose reach grows (n-gram and recalled matches)."""
        self._lookups = lookups
        self._plain: deque[float] = deque(maxlen=self._WINDOW)  # seconds per token of plain rounds
        self.begin_request()

    def begin_request(self) -> None:
        """Forget the previous request's losses and rests."""
        self._round = 0
        self._loss: dict[str, float] = {}
        self._rest_until: dict[str, int] = {}
        self._rest: dict[str, int] = {}
        self.rests = 0  # times a source was rested in this request
        self.rested: set[str] = set()  # the sources rested in this request (ALL: drafting as a whole)
        self.times = RoundTimes()  # this request's whole rounds
        self._pending: Optional[tuple[str, int, float]] = None
        self.reach = self._FIRST_REACH  # most tokens a lookup may draft in the next round

    @property
    def plain_seconds(self) -> float:
        """Median seconds per token of recent plain rounds (0.0 before any)."""
        return median(self._plain) if self._plain else 0.0

    def loss(self, source: str) -> float:
        """`source`'s running loss against plain decoding, in plain steps (< 0: it wins)."""
        return self._loss.get(source, 0.0)

    def allowed(self, offers: Mapping[str, int]) -> dict[str, int]:
        """The offers whose source is not resting, a lookup's within its reach."""
        self._round += 1
        if self._rest_until.get(ALL, 0) >= self._round:
            return {}
        return {
            source: min(n, self.reach) if source in self._lookups else n
            for source, n in offers.items()
            if self._rest_until.get(source, 0) < self._round
        }

    def observe(self, source: str, tokens: int, seconds: float) -> None:
        """One whole round: `source` chose it (PLAIN: none), it emitted `tokens`, and it
        took `seconds` from its start to the next round's."""
        if tokens <= 0 or seconds < 0:
            return
        if source == PLAIN:
            self._plain.append(seconds / tokens)
            self.times.plain_rounds += 1
            self.times.plain_tokens += tokens
            self.times.plain_seconds += seconds
            return
        self.times.drafted_tokens += tokens
        self.times.drafted_seconds += seconds
        if len(self._plain) < self._MIN_PLAIN:
            return
        lost = seconds / self.plain_seconds - tokens
        for name in (source, ALL):
            loss = self._DECAY * self._loss.get(name, 0.0) + lost
            self._loss[name] = loss
            if loss > self._LOSS_STEPS:
                rest = self._rest.get(name, self._REST_ROUNDS // 2) * 2
                self._rest[name] = rest
                self._rest_until[name] = self._round + rest
                self._loss[name] = 0.0  # judged afresh after its rest
                self.rests += 1
                self.rested.add(name)

    def start_round(self, now: float) -> None:
        """Close the round in progress (begun by end_round) at `now`, the next one's start."""
        if self._pending is not None:
            source, tokens, began = self._pending
            self.observe(source, tokens, now - began)
            self._pending = None

    def end_round(self, source: str, tokens: int, began: float, drafted: int = 0, kept: int = 0) -> None:
        """A round that began at `began` chose `source`, which drafted `drafted` tokens
        of which the verify kept `kept`, and emitted `tokens`; its time ends where the
        next starts (start_round), after the caller took its tokens."""
        self._pending = (source, tokens, began)
        if source in self._lookups and drafted:
            if kept == drafted:
                self.reach = max(self.reach, 2 * kept)
            elif 2 * kept < self.reach:
                self.reach = max(self._FIRST_REACH, self.reach // 2)
