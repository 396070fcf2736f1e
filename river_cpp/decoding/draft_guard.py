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
sizes, memory buckets) losing its own two steps before it rests would add up. It
decides nothing else; DraftLength still chooses among the sources it leaves on offer.
"""

from __future__ import annotations

from collections import deque
from statistics import median
from typing import Mapping, Optional

from river_cpp.decoding.draft_length import PLAIN

ALL = "*"  # the guard's name for every source together


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

    def __init__(self) -> None:
        self._plain: deque[float] = deque(maxlen=self._WINDOW)  # seconds per token of plain rounds
        self.begin_request()

    def begin_request(self) -> None:
        """Forget the previous request's losses and rests."""
        self._round = 0
        self._loss: dict[str, float] = {}
        self._rest_until: dict[str, int] = {}
        self._rest: dict[str, int] = {}
        self.rests = 0  # times a source was rested in this request
        self._pending: Optional[tuple[str, int, float]] = None

    @property
    def plain_seconds(self) -> float:
        """Median seconds per token of recent plain rounds (0.0 before any)."""
        return median(self._plain) if self._plain else 0.0

    def loss(self, source: str) -> float:
        """`source`'s running loss against plain decoding, in plain steps (< 0: it wins)."""
        return self._loss.get(source, 0.0)

    def allowed(self, offers: Mapping[str, int]) -> dict[str, int]:
        """The offers whose source is not resting."""
        self._round += 1
        if self._rest_until.get(ALL, 0) >= self._round:
            return {}
        return {source: n for source, n in offers.items() if self._rest_until.get(source, 0) < self._round}

    def observe(self, source: str, tokens: int, seconds: float) -> None:
        """One whole round: `source` chose it (PLAIN: none), it emitted `tokens`, and it
        took `seconds` from its start to the next round's."""
        if tokens <= 0 or seconds < 0:
            return
        if source == PLAIN:
            self._plain.append(seconds / tokens)
            return
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

    def start_round(self, now: float) -> None:
        """Close the round in progress (begun by end_round) at `now`, the next one's start."""
        if self._pending is not None:
            source, tokens, began = self._pending
            self.observe(source, tokens, now - began)
            self._pending = None

    def end_round(self, source: str, tokens: int, began: float) -> None:
        """A round that began at `began` chose `source` and emitted `tokens`; its time
        ends where the next starts (start_round), after the caller took its tokens."""
        self._pending = (source, tokens, began)
