"""river_cpp.decoding.draft_guard: whole rounds that lose to plain rest their source;
in the loop, a cost the controller's own timings miss is caught by the guard, and the
tokens stay the backbone's; the rounds it timed estimate the speed against plain decoding."""

from __future__ import annotations

import numpy as np
import pytest

import river_cpp.decoding.speculative as speculative
from river_cpp import ExitPolicy
from river_cpp.decoding.draft_guard import ALL, RoundGuard, RoundTimes
from river_cpp.decoding.draft_length import PLAIN
from river_cpp.decoding.sampling import Sampler, SamplingParams
from river_cpp.decoding.speculative import Speculative, SpeculativeStats, speculative_step
from river_cpp.decoding.speculative_stats import SourceStats, source_words


def test_a_losing_source_rests_and_a_winning_one_does_not():
    guard = RoundGuard()
    for _ in range(3):
        guard.observe(PLAIN, 1, 1.0)
    assert guard.plain_seconds == 1.0
    for _ in range(20):  # 5 tokens for 3 steps' time: wins
        assert guard.allowed({"ngram3": 8}) == {"ngram3": 8}
        guard.observe("ngram3", 5, 3.0)
    assert guard.loss("ngram3") < 0 and guard.rests == 0
    # 2 tokens for 4 steps' time: after two such rounds it rests for 16 rounds.
    guard.observe("ngram2", 2, 4.0)
    assert guard.allowed({"ngram2": 8}) == {"ngram2": 8}
    guard.observe("ngram2", 2, 4.0)
    assert guard.rests == 1
    rested = [guard.allowed({"ngram2": 8, "ngram3": 8}) for _ in range(17)]
    assert all(offers == {"ngram3": 8} for offers in rested[:16])
    assert rested[16] == {"ngram2": 8, "ngram3": 8}
    # A second rest in the same request lasts twice as long; a round that loses 9 steps
    # outweighs what drafting had won, so drafting as a whole rests too (16 rounds).
    guard.observe("ngram2", 1, 10.0)
    assert guard.rests == 3 and guard.loss(ALL) == 0.0
    offers = [guard.allowed({"ngram2": 8, "ngram3": 8}) for _ in range(40)]
    assert offers[:16] == [{}] * 16
    assert offers[16:32] == [{"ngram3": 8}] * 16 and offers[32] == {"ngram2": 8, "ngram3": 8}


def test_sources_that_each_lose_a_little_rest_drafting_as_a_whole():
    guard = RoundGuard()
    for _ in range(2):
        guard.observe(PLAIN, 1, 1.0)
    # a dozen sources, each losing one step once: none alone passes two steps
    for k in range(12):
        guard.allowed({f"ngram{k}": 4})
        guard.observe(f"ngram{k}", 1, 2.0)
    assert all(guard.loss(f"ngram{k}") <= 1.0 for k in range(12))
    assert guard.rests >= 1 and guard.allowed({"ngram99": 4}) == {}


def test_nothing_is_judged_before_plain_rounds_are_timed_and_each_request_starts_afresh():
    guard = RoundGuard()
    guard.observe("river", 1, 100.0)  # no plain timing yet
    assert guard.rests == 0 and guard.loss("river") == 0.0
    guard.observe(PLAIN, 1, 1.0)
    guard.observe(PLAIN, 1, 1.0)
    guard.observe("river", 1, 100.0)
    assert guard.rests == 2 and guard.allowed({"river": 4}) == {}  # the river, and drafting as a whole
    guard.begin_request()
    assert guard.allowed({"river": 4}) == {"river": 4} and guard.rests == 0
    assert guard.plain_seconds == 1.0  # the plain step is the model's, kept


def test_a_lookup_reaches_further_only_as_its_rounds_are_kept_whole():
    guard = RoundGuard(lookups=frozenset({"ngram6", "memory32"}))
    first = RoundGuard._FIRST_REACH
    assert guard.allowed({"ngram6": 24, "river": 8}) == {"ngram6": first, "river": 8}  # the river has no reach
    reach = first
    for _ in range(3):  # each round kept whole doubles the reach, shared by every lookup
        guard.end_round("ngram6", reach + 1, 0.0, drafted=reach, kept=reach)
        reach *= 2
        assert guard.allowed({"memory32": 64}) == {"memory32": reach}
    guard.end_round("memory32", 3, 0.0, drafted=3, kept=3)  # a short match kept whole takes nothing away
    assert guard.reach == reach
    guard.end_round("ngram6", reach // 2 + 1, 0.0, drafted=reach, kept=reach // 2)  # half kept: the reach holds
    assert guard.reach == reach
    while reach > first:  # each rejection near a round's start halves it, down to the first reach
        guard.end_round("ngram6", 2, 0.0, drafted=reach, kept=1)
        reach //= 2
        assert guard.allowed({"ngram6": 64}) == {"ngram6": reach}
    guard.end_round("ngram6", 1, 0.0, drafted=first, kept=0)
    assert guard.reach == first
    guard.end_round("river", 9, 0.0, drafted=8, kept=8)  # not a lookup
    assert guard.reach == first
    guard.end_round("ngram6", first + 1, 0.0, drafted=first, kept=first)
    guard.begin_request()  # a new request meets new text
    assert guard.reach == first


def test_rounds_are_timed_from_start_to_start():
    guard = RoundGuard()
    guard.start_round(0.0)  # nothing in progress
    guard.end_round(PLAIN, 1, 0.0)
    guard.start_round(2.0)
    assert guard.plain_seconds == 2.0


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class _SlowRewindModel:
    """A backbone whose greedy token at each position is sequence[position] (a random
    walk over three tokens: short n-grams recur, their continuations do not). A forward
    costs one tick on `clock` whatever its length, so the controller's own timings see
    drafting as free; dropping verified positions costs `rewind_cost` ticks, after
    the round's timings: a cost only the guard's wall clock sees."""

    n_ctx, n_layer, n_threads, has_river = 512, 2, 1, False
    policy = ExitPolicy.never()

    def __init__(self, sequence: list[int], clock: _Clock, rewind_cost: float, n_vocab: int = 8) -> None:
        self.sequence, self.clock, self.rewind_cost = sequence, clock, rewind_cost
        self.n_vocab, self.n_past = n_vocab, 0
        self.last_exit_layers = np.zeros(0, dtype=np.int32)

    def reset(self) -> None:
        self.n_past = 0

    def rewind(self, n_past: int) -> None:
        if n_past < self.n_past:
            self.clock.now += self.rewind_cost
        self.n_past = n_past

    def check_policy(self, policy: ExitPolicy) -> None:
        pass

    def cached_prefix(self, ids, *, route="prompt", policy=None) -> int:
        return 0

    def reuse_prefix(self, ids, *, route="prompt", policy=None) -> int:  # nothing is kept
        self.rewind(0)
        return 0

    def forward(self, ids, *, last_only=False, route="auto", policy=None, exit_vocab=None, prompt=False) -> np.ndarray:
        self.clock.now += 1.0
        positions = np.arange(self.n_past, self.n_past + len(ids))
        self.n_past += len(ids)
        self.last_exit_layers = np.full(len(ids), self.n_layer, dtype=np.int32)
        logits = np.zeros((len(ids), self.n_vocab), dtype=np.float32)
        logits[np.arange(len(ids)), [self.sequence[p + 1] for p in positions]] = 1.0
        return logits[-1:] if last_only else logits


LOSS_STEPS = RoundGuard._LOSS_STEPS
SEQUENCE = [int(t) for t in np.random.default_rng(7).integers(1, 4, size=400)]
N_PROMPT, N_TOKENS = 40, 120


def _run(monkeypatch, loss_steps: float) -> tuple[list[int], float, SpeculativeStats]:
    clock = _Clock()
    monkeypatch.setattr(speculative, "time", clock)
    monkeypatch.setattr(RoundGuard, "_LOSS_STEPS", loss_steps)
    model = _SlowRewindModel(SEQUENCE, clock, rewind_cost=6.0)
    stats = SpeculativeStats()
    spec = Speculative(draft="ngram", memory=False, ngram_max=3, max_lookup=8)
    steps = speculative_step(model, SEQUENCE[:N_PROMPT], Sampler(SamplingParams(temperature=0.0)), spec, stats)
    tokens = [step.token for _, step in zip(range(N_TOKENS), steps)]
    return tokens, clock.now, stats


def test_the_guard_rests_drafts_whose_whole_rounds_lose(monkeypatch):
    unguarded_tokens, unguarded_time, unguarded = _run(monkeypatch, float("inf"))
    guarded_tokens, guarded_time, guarded = _run(monkeypatch, LOSS_STEPS)
    expected = SEQUENCE[N_PROMPT : N_PROMPT + N_TOKENS]
    assert unguarded_tokens == guarded_tokens == expected
    assert unguarded.guard_rests == 0 and guarded.guard_rests > 0
    assert guarded_time < unguarded_time
    assert "drafts from repeats in the text and all drafts paused for a while" in guarded.summary()
    # Plain decoding costs this model one tick a token: the footer's estimate, from the
    # request's own plain rounds, is the speed the clock saw against that.
    speed = (N_TOKENS - 1) / (guarded_time - 1.0)  # less the prompt's forward and its token
    assert guarded.round_times.speedup() == pytest.approx(speed, rel=0.1)
    assert f"about {guarded.round_times.speedup():.2f}x plain decoding" in guarded.speed_summary()


def test_round_times_estimate_the_speed_over_plain_decoding():
    # plain rounds: 10 tokens in 1 s; drafted: 30 in 1 s. Plain decoding would have
    # taken 40 x 0.1 s = 4 s where the rounds took 2 s.
    times = RoundTimes(plain_rounds=10, plain_tokens=10, plain_seconds=1.0, drafted_tokens=30, drafted_seconds=1.0)
    assert times.speedup() == pytest.approx(2.0)
    slow = RoundTimes(plain_rounds=10, plain_tokens=10, plain_seconds=1.0, drafted_tokens=5, drafted_seconds=1.0)
    assert slow.speedup() == pytest.approx(0.75)  # 15 x 0.1 s against 2 s
    assert RoundTimes(1, 1, 0.1, 30, 1.0).speedup() is None  # one plain round is too few to price a token
    assert RoundTimes(10, 10, 1.0, 0, 0.0).speedup() is None  # nothing drafted: nothing to compare


def test_the_guard_times_each_request_s_rounds_plain_and_drafted():
    guard = RoundGuard()
    for _ in range(3):
        guard.observe(PLAIN, 1, 0.1)
    guard.observe("ngram3", 4, 0.2)
    guard.observe("ngram2", 2, 0.1)
    times = guard.times
    assert (times.plain_rounds, times.plain_tokens, times.drafted_tokens) == (3, 3, 6)
    assert times.plain_seconds == pytest.approx(0.3) and times.drafted_seconds == pytest.approx(0.3)
    guard.begin_request()
    assert guard.times == RoundTimes()


def test_the_footer_says_how_fast_against_plain_and_which_drafts_paused():
    times = RoundTimes(plain_rounds=10, plain_tokens=10, plain_seconds=1.0, drafted_tokens=30, drafted_seconds=1.0)
    stats = SpeculativeStats(drafted=36, accepted=24, guard_rested={"ngram2", "ngram3"}, round_times=times)
    speed = stats.speed_summary()
    assert speed.startswith("speed: about 2.00x plain decoding (an estimate")
    assert "10.0 tokens/s" in speed and "30.0 tokens/s" in speed
    summary = stats.summary()
    assert "drafts from repeats in the text paused for a while: they were slower than plain decoding" in summary
    assert "rested" not in summary and "24 kept" in summary
    assert SpeculativeStats().speed_summary() is None  # nothing drafted: the footer says so otherwise
    few = SpeculativeStats(drafted=3, round_times=RoundTimes(1, 1, 0.1, 3, 0.1))
    assert few.speed_summary().startswith("speed: not estimated")


def test_the_summary_names_each_source_in_plain_words():
    by_source = {"ngram3": SourceStats(2, 6, 4), "memory4": SourceStats(1, 4, 4), "plain": SourceStats(5)}
    summary = SpeculativeStats(rounds=8, drafted=10, accepted=8, by_source=by_source).summary()
    assert "repeats in the text (3-token matches): 2 rounds, 6 drafted (67% kept)" in summary
    assert "earlier calls (4-token matches): 1 round, 4 drafted (100% kept)" in summary
    assert "no draft (plain steps): 5 rounds" in summary
    assert "ngram" not in summary and "memory4" not in summary  # no private names left
    assert source_words("copy2") == "repeats in the text, copied into river drafts (2-token matches)"
    assert source_words("river") == "the river" and source_words("model") == "the draft model"
