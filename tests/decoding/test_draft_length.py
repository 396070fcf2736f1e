"""The portfolio: each round the draft source with the most expected tokens per second,
from each source's own acceptance and cost and the shared verify costs."""

from river_cpp.decoding.draft_length import PLAIN, DraftLength, drafts_by_source, unused_offer_tested
from river_cpp.decoding.speculative import observe_round

FREE = frozenset({"ngram3"})


def _round(length: DraftLength, offers: dict, *, accepted: dict, draft_cost: dict, verify_one: float = 1.0):
    """One simulated round: the choice, then its observation. `accepted[source]`: the
    share of a drafted run kept; verify costs 1 + 0.3 per extra position."""
    source, k = length.choose(1000, offers)
    n_accepted = int(round(accepted.get(source, 0.0) * k))
    observe_round(  # as the loop records a round
        length,
        source=source,
        spans=[(source, k)] if k else [],
        n_accepted=n_accepted,
        draft_forwards=0 if source in length.free_sources else k,
        draft_seconds=k * draft_cost.get(source, 0.0),
        verify_seconds=verify_one * (1 + 0.3 * k),
        unused={  # the free offers, each agreeing with the emitted tokens for its share
            offer: (limit, int(round(accepted.get(offer, 0.0) * limit)))
            for offer, limit in offers.items()
            if offer in length.free_sources
        },
    )
    return source, k


def test_a_free_draft_that_is_accepted_wins_over_a_costly_one():
    length = DraftLength(8, adaptive=True, free_sources=FREE)
    accepted = {"ngram3": 1.0, "river": 0.6}
    cost = {"river": 0.35}
    chosen = [_round(length, {"ngram3": 8, "river": 8}, accepted=accepted, draft_cost=cost)[0] for _ in range(40)]
    assert chosen[:3] == [PLAIN] * 3  # one position's verify cost first
    assert chosen[-20:].count("ngram3") >= 18


def test_the_river_drafts_where_no_ngram_matches_and_a_bad_ngram_is_dropped():
    length = DraftLength(8, adaptive=True, free_sources=FREE)
    accepted = {"ngram3": 0.0, "river": 0.9}
    cost = {"river": 0.2}
    chosen = [_round(length, {"ngram3": 4, "river": 8}, accepted=accepted, draft_cost=cost)[0] for _ in range(60)]
    assert chosen[-20:].count("river") >= 18
    river_only = [_round(length, {"river": 8}, accepted=accepted, draft_cost=cost)[0] for _ in range(10)]
    assert river_only.count("river") >= 9


def test_no_source_that_pays_means_plain_decoding():
    length = DraftLength(8, adaptive=True, free_sources=FREE)
    accepted = {"ngram3": 0.0, "river": 0.0}
    cost = {"river": 0.5}
    chosen = [_round(length, {"ngram3": 4, "river": 8}, accepted=accepted, draft_cost=cost) for _ in range(80)]
    drafted = [k for _, k in chosen[-40:] if k]
    assert len(drafted) <= 2  # a probe now and then


def test_an_offer_bounds_the_length():
    length = DraftLength(8, adaptive=True, free_sources=FREE)
    for _ in range(30):
        source, k = _round(length, {"ngram3": 3}, accepted={"ngram3": 1.0}, draft_cost={})
        assert k <= 3


def test_a_fixed_length_takes_the_first_offer():
    length = DraftLength(5, adaptive=False)
    assert length.choose(100, {"ngram2": 3, "river": 5}) == ("ngram2", 3)
    assert length.choose(100, {}) == (PLAIN, 0)
    assert length.choose(2, {"river": 5}) == ("river", 2)


def test_a_free_source_drafts_past_the_costly_sources_limit():
    fixed = DraftLength(4, adaptive=False, free_sources=FREE, max_free=12)
    assert fixed.choose(100, {"ngram3": 20}) == ("ngram3", 12)
    assert fixed.choose(100, {"river": 20}) == ("river", 4)
    assert fixed.choose(6, {"ngram3": 20}) == ("ngram3", 6)
    adaptive = DraftLength(4, adaptive=True, free_sources=FREE, max_free=12)
    lengths = [_round(adaptive, {"ngram3": 12, "river": 12}, accepted={"ngram3": 1.0}, draft_cost={"river": 0.5})[1]]
    lengths += [_round(adaptive, {"ngram3": 12}, accepted={"ngram3": 1.0}, draft_cost={})[1] for _ in range(40)]
    assert max(lengths) == 12  # a copy that is always kept: the verify's 0.3 a position pays for all 12


def test_each_span_of_a_round_is_credited_to_its_source():
    spans = [("river", 2), ("ngram3", 6), ("river", 1)]
    assert drafts_by_source(spans, 9) == {"river": (3, 3), "ngram3": (6, 6)}
    assert drafts_by_source(spans, 4) == {"river": (2, 2), "ngram3": (3, 2)}  # rejected in the copy
    assert drafts_by_source(spans, 1) == {"river": (2, 1)}  # the copy was never tested
    assert drafts_by_source([("ngram2", 4)], 0) == {"ngram2": (1, 0)}


def test_a_river_round_copies_a_match_only_when_it_is_as_good_as_the_river_for_less():
    length = DraftLength(8, adaptive=True, free_sources=FREE | {"copy3", "copy1"})
    accepted = {"ngram3": 0.9, "river": 0.9}
    for _ in range(20):
        _round(length, {"river": 8}, accepted=accepted, draft_cost={"river": 0.35})
    for _ in range(10):  # copied 3-gram matches as good as the river, 1-gram ones never right
        _round(length, {"copy3": 8}, accepted={"copy3": 0.9}, draft_cost={})
        _round(length, {"copy1": 8}, accepted={"copy1": 0.0}, draft_cost={})
    assert length.copy_pays("copy3", 6)
    assert not length.copy_pays("copy1", 6)


def test_a_probe_drafts_from_the_source_closest_to_paying():
    """The river's estimate sank in a bad patch; n-gram matches that never pay are
    offered first every round. The probe must try the river, or it never recovers."""
    length = DraftLength(8, adaptive=True, free_sources=FREE)
    for _ in range(20):
        _round(length, {"river": 8}, accepted={"river": 0.9}, draft_cost={"river": 0.35})
    for _ in range(10):
        _round(length, {"river": 8}, accepted={"river": 0.0}, draft_cost={"river": 0.35})
    for _ in range(3):
        _round(length, {"ngram3": 8}, accepted={"ngram3": 0.0}, draft_cost={})
    chosen = [
        _round(length, {"ngram3": 8, "river": 8}, accepted={"river": 0.9}, draft_cost={"river": 0.35})
        for _ in range(40)
    ]
    assert ("river", 1) in chosen, chosen
    assert chosen[-1][0] == "river"  # and, once probed, it drafts again


def test_an_unused_offer_is_tested_up_to_its_first_disagreement_with_the_emitted_tokens():
    assert unused_offer_tested(8, 2, 5) == (3, 2)  # the third token disagreed
    assert unused_offer_tested(8, 5, 5) == (5, 5)  # past the emitted tokens: untested
    assert unused_offer_tested(3, 3, 6) == (3, 3)
    assert unused_offer_tested(8, 0, 1) == (1, 0)  # a plain round tests one token
    assert unused_offer_tested(8, 1, 1) == (1, 1)


def test_a_free_source_is_learned_without_drafting_it():
    """N-gram offers are scored against the emitted tokens while the river drafts:
    one that agrees takes over with no trial round, and one that never agrees is
    never drafted, not even at its first offer or as a probe."""
    length = DraftLength(8, adaptive=True, free_sources=frozenset({"ngram3", "ngram1"}))
    for _ in range(20):
        _round(length, {"river": 8}, accepted={"river": 0.9}, draft_cost={"river": 0.35})
    good = [
        _round(length, {"ngram3": 8, "river": 8}, accepted={"ngram3": 1.0, "river": 0.9}, draft_cost={"river": 0.35})
        for _ in range(10)
    ]
    assert good[-1] == ("ngram3", 8)
    bad = [_round(length, {"ngram1": 8}, accepted={"ngram1": 0.0}, draft_cost={}) for _ in range(300)]
    assert all(k == 0 for _, k in bad), [c for c in bad if c[1]]  # the first offer too: no bet on the prior
    assert length.estimate("ngram1").acceptance < 0.05


def _lost_to_bets_that_fail(length: DraftLength, rounds: int) -> tuple[float, float]:
    """(time lost against plain decoding, time spent) over `rounds` rounds of a river
    on the demo model's costs (a drafted token 0.45 of a plain step, a verify of 2
    positions 1.9, each further position 0.2), whose one-token drafts are always kept
    and whose longer ones never past the first: each accepted probe makes its estimate
    look good, and the next round loses."""
    lost = spent = 0.0
    for _ in range(rounds):
        source, k = length.choose(1000, {"river": 8})
        draft, verify = 0.45 * k, 1 + 0.9 * min(k, 1) + 0.2 * max(k - 1, 0)  # a plain step costs 1
        length.observe(
            n_drafted=k,
            n_accepted=min(k, 1),
            draft_seconds=draft,
            verify_seconds=verify,
            draft_forwards=k,
            source=source if k else None,
        )
        spent += draft + verify
        if k:
            lost += draft + verify - (min(k, 1) + 1)
    return lost, spent


def test_a_source_whose_bets_lose_costs_at_most_its_budget():
    """Whatever its estimates say, a source that never pays loses at most its starting
    budget, its share of the time, and two rounds' worth: the last round's overdraft,
    and what the charges miss by using the decisions' cost curve, optimistic about
    sizes verified fewer than three times."""
    length = DraftLength(8, adaptive=True)
    lost, spent = _lost_to_bets_that_fail(length, 3000)
    one_round = 0.45 * 8 + 0.9 + 0.2 * 7 - 1  # the most a round of 8 drafts can lose
    bound = DraftLength._BUDGET_START + DraftLength._BUDGET_SHARE * spent + 2 * one_round
    assert 0 < lost <= bound

    class Unbudgeted(DraftLength):
        _BUDGET_START = float("inf")

    unbudgeted, _ = _lost_to_bets_that_fail(Unbudgeted(8, adaptive=True), 3000)
    assert unbudgeted > bound  # without the budget this case breaks the bound


def test_a_free_source_is_drafted_only_on_several_tested_tokens():
    """One agreeing token is no evidence to bet 8 drafts on, and waiting costs
    nothing: the offers are scored every round anyway."""
    length = DraftLength(8, adaptive=True, free_sources=FREE)
    evidence_when_drafted = []
    for _ in range(12):
        evidence = length.estimate("ngram3").evidence
        source, k = _round(length, {"ngram3": 8}, accepted={"ngram3": 1.0}, draft_cost={})
        if k:
            evidence_when_drafted.append(evidence)
    assert evidence_when_drafted, "an offer that always agrees is drafted in the end"
    assert min(evidence_when_drafted) >= DraftLength._FREE_EVIDENCE


def test_copied_tokens_are_not_charged_as_forwards():
    """A river round that copied most of its tokens from a match spent one forward:
    its charge is that forward and the verify, not a forward per token."""
    length = DraftLength(8, adaptive=True)
    for _ in range(3):  # one position's verify, timed
        length.observe(n_drafted=0, n_accepted=0, draft_seconds=0.0, verify_seconds=1.0, draft_forwards=0)
    length.observe(
        n_drafted=5,
        n_accepted=5,
        draft_seconds=0.4,
        verify_seconds=1.0,
        draft_forwards=1,
        source="river",
        spans=[("river", 1), ("copy4", 4)],
    )
    # 6 tokens against one forward (0.4) and a verify of 6 positions (1.0): 4.6 won
    assert abs(length.budget["river"] - (DraftLength._BUDGET_START + 6 - 1.4)) < 1e-6


def _timed_river(ends_unsure: bool, timed_sizes: range) -> DraftLength:
    """A DraftLength whose river is accepted at 0.6 and costs 0.3 of a one-position
    verify, with every size in `timed_sizes` timed three times on a curve that is flat
    to 6 positions and steps to twice the cost at 7."""
    length = DraftLength(8, adaptive=True, ends_unsure=ends_unsure)
    for size in timed_sizes:
        for _ in range(3):
            length.verify.observe(size, 1.0 if size <= 6 else 2.0)
    length.estimate("river").observe(1, offered=10, accepted=6, draft_seconds=0.3, forwards=1)
    return length


def test_a_draft_that_ends_unsure_gets_the_length_that_pays_at_full_acceptance():
    # At acceptance 0.6 a round of 1 or 2 pays most: (1 + 0.6) / (0.3 + 1) = 1.23 tokens
    # per verify's time; at full acceptance, 5 (6 / 2.5 = 2.4), where the curve steps.
    _, short = _timed_river(False, range(1, 10)).choose(1000, {"river": 8})
    assert short in (1, 2)
    assert _timed_river(True, range(1, 10)).choose(1000, {"river": 8}) == ("river", 5)
    # Only timed sizes count: with verifies of at most 4 positions timed, 3 tokens.
    assert _timed_river(True, range(1, 5)).choose(1000, {"river": 8}) == ("river", 3)
    # The source's offer bounds it, as any length.
    assert _timed_river(True, range(1, 10)).choose(1000, {"river": 4}) == ("river", 4)


def test_a_source_that_cannot_pay_at_full_acceptance_is_not_probed():
    """A drafted token that costs 0.9 of a step, on a verify of 2 positions at 1.1
    steps (a 4-bit river on a 4-bit backbone): even if every draft were kept, no
    length beats plain decoding, so once its cost is timed three times the river is never
    drafted or probed again, however its acceptance looks."""
    length = DraftLength(8, adaptive=True)
    drafted = []
    for _ in range(600):
        source, k = length.choose(1000, {"river": 8})
        length.observe(
            n_drafted=k,
            n_accepted=k,  # every draft kept
            draft_seconds=0.9 * k,
            verify_seconds=1.0 if not k else 1.1 + 0.3 * (k - 1),
            draft_forwards=k,
            source=source if k else None,
        )
        drafted.append(k)
    rounds = [i for i, k in enumerate(drafted) if k]
    assert drafted[rounds[0]] == DraftLength._FIRST_DRAFT  # the round that measures its cost
    # two probes more, so that its cost rests on three timings (one may have stalled), then none
    assert len(rounds) == DraftLength._TRUSTED_TIMINGS, rounds
