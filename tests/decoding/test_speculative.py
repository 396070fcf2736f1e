"""river_cpp.decoding.speculative: lossless River gives the backbone's tokens.

Greedy: token identity with the backbone's own greedy run (a difference is allowed
only at a near-tie of the backbone's top two logits, and reported). Sampling: the
joint distribution of the first two sampled tokens, checked with a chi-square test
against the backbone's exact one. The cache after speculative rounds holds the
backbone's K/V, not the river's. The draft length adapts to what pays.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pytest

from river_cpp import ExitPolicy, RiverModel, Speculative
from river_cpp.decoding.sampling import Sampler, SamplingParams
from river_cpp.decoding.speculative import DraftLength, draft_length_for, speculative_step

PROMPT = "The quick brown fox"
N_CTX = 128
NEAR_TIE = 1e-3  # of the logit scale: where batched and single-token logits may disagree


@pytest.fixture(scope="module")
def model(tiny_llama: Path, tmp_path_factory, monkeypatch_module) -> RiverModel:
    monkeypatch_module.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    with RiverModel(tiny_llama, n_ctx=N_CTX, n_threads=1, river="q4_0") as model:
        yield model


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def backbone_greedy(model: RiverModel, prompt, n: int) -> list[int]:
    """The backbone's own greedy tokens: no exit anywhere."""
    model.reset()
    return model.generate(prompt, max_tokens=n, policy=ExitPolicy.never(), speculative=False).token_ids


def assert_backbone_tokens(model: RiverModel, prompt, expected: list[int], got: list[int]) -> None:
    """got == expected, except from a position where the backbone's top two logits
    (along `got`) tie within NEAR_TIE of their scale; such a position is reported."""
    if got == expected:
        return
    i = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b), min(len(expected), len(got)))
    assert i < min(len(expected), len(got)), f"lengths differ: {len(expected)} vs {len(got)}"
    ids = model.tokenize(prompt, add_bos=True, special=True) + got[:i]
    model.reset()
    logits = model.forward(ids, last_only=True, route="backbone")[0]
    top2 = np.sort(logits)[-2:]
    gap, scale = float(top2[1] - top2[0]), float(np.abs(logits).max())
    assert gap < NEAR_TIE * scale, f"token {i} differs ({expected[i]} vs {got[i]}) with a top-2 gap of {gap}"
    message = f"speculative greedy differs from the backbone at token {i}, a near-tie (gap {gap:.2e})"
    warnings.warn(message, stacklevel=2)


# ---------------------------------------------------------------- greedy identity


@pytest.mark.parametrize(
    "spec",
    [
        Speculative(),
        Speculative(max_draft=4, adaptive=False),
        Speculative(max_draft=3, p_min=0.5, adaptive=False),
        Speculative(draft=ExitPolicy.at_layer(1), max_draft=2, adaptive=False),
        Speculative(max_draft=4, adaptive=False, draft_vocab=40),
    ],
    ids=["default", "fixed-4", "p-min", "exit-policy-draft", "small-draft-vocab"],
)
def test_greedy_speculative_is_the_backbone(model, spec):
    expected = backbone_greedy(model, PROMPT, 40)
    model.reset()
    result = model.generate(PROMPT, max_tokens=40, speculative=spec)
    assert_backbone_tokens(model, PROMPT, expected, result.token_ids)
    stats = result.speculative
    assert stats.generated >= len(result.token_ids) - 1
    assert stats.rounds > 0 and 0 <= stats.accepted <= stats.drafted
    assert all(layer == model.n_layer for layer in result.exit_layers)
    if not spec.adaptive and spec.p_min == 0:
        assert stats.drafted > 0


def test_rejections_happen_and_are_repaired(model):
    """The Q4_0 river of a random tiny model disagrees often: both paths are exercised."""
    model.reset()
    result = model.generate(PROMPT, max_tokens=60, speculative=Speculative(max_draft=4, adaptive=False))
    stats = result.speculative
    assert 0 < stats.accepted < stats.drafted


def test_separate_draft_model(model, make_tiny_gguf):
    """A different model with the same vocabulary drafts (classic speculation)."""
    other = make_tiny_gguf("draft_other", seed=7)
    with RiverModel(other, n_ctx=N_CTX, n_threads=1, river=None) as draft:
        expected = backbone_greedy(model, PROMPT, 30)
        model.reset()
        result = model.generate(
            PROMPT, max_tokens=30, speculative=Speculative(draft=draft, max_draft=3, adaptive=False)
        )
        assert_backbone_tokens(model, PROMPT, expected, result.token_ids)
        assert result.speculative.drafted > 0
        assert draft.n_past <= model.n_past + 1


def test_the_model_drafting_for_itself_accepts_everything(tiny_llama):
    """The backbone file loaded twice: every drafted token is the backbone's."""
    with (
        RiverModel(tiny_llama, n_ctx=N_CTX, n_threads=1, river=None) as target,
        RiverModel(tiny_llama, n_ctx=N_CTX, n_threads=1, river=None) as draft,
    ):
        result = target.generate(
            PROMPT, max_tokens=30, speculative=Speculative(draft=draft, max_draft=4, adaptive=False)
        )
    stats = result.speculative
    assert stats.drafted > 0
    assert stats.accepted >= stats.drafted - 1  # a batch-vs-single near-tie at most


@pytest.mark.real_model
@pytest.mark.slow
def test_real_model_greedy_identity(demo_backbone, river_cache):
    """The demo model with a Q8_0 and a Q4_0 river (a Q8_0 head) drafting, at a fixed
    length (the adaptive one rightly drafts little on this model). Its backbone is F16:
    exact="bitwise" makes every verify row the plain step's, so the tokens are identical."""
    for river in ("q8_0", "q4_0"):
        with RiverModel(
            demo_backbone, n_ctx=256, n_threads=1, river=river, river_head="q8_0", exact="bitwise"
        ) as model:
            prompt = model.tokenizer.apply_chat_template(
                [{"role": "user", "content": "Write a short poem about a river and the sea."}]
            )
            expected = backbone_greedy(model, prompt, 48)
            model.reset()
            spec = Speculative(draft="river", max_draft=4, adaptive=False)
            result = model.generate(prompt, max_tokens=48, speculative=spec)
            assert result.token_ids == expected
            assert len(result.token_ids) == 48
            assert result.speculative.acceptance_rate > 0.5


# ---------------------------------------------------------------- the cache after rounds


def test_cache_holds_the_backbones_kv(model):
    """After speculative rounds every cached row is the backbone's (as a backbone-only
    run writes it), not the river's the drafts wrote first."""
    model.reset()
    tokens = model.generate(PROMPT, max_tokens=30, speculative=Speculative(max_draft=4, adaptive=False))
    ids = tokens.prompt_token_ids + tokens.token_ids
    n = min(model.n_past, len(ids) - 1)  # a last round may have verified tokens past max_tokens
    spec_k, spec_v = model.engine.read_kv(1, 0, n)
    model.reset()
    model.forward(ids[:n], route="backbone")
    ref_k, ref_v = model.engine.read_kv(1, 0, n)
    model.reset()
    # the river everywhere: what the drafts alone would leave
    model.forward(ids[:n], route="decode", policy=ExitPolicy.at_layer(0))
    river_k, _ = model.engine.read_kv(1, 0, n)
    river_error = np.abs(river_k - ref_k).max()
    assert np.abs(spec_k - ref_k).max() < 0.05 * river_error
    assert np.abs(spec_v - ref_v).max() < 0.05 * np.abs(ref_v).max()


def test_prompt_cache_is_reused_only_for_backbone_rows(model):
    model.reset()
    ids = model.tokenize(PROMPT, add_bos=True, special=True)
    model.forward(ids, route="backbone")
    model.forward([1000], route="decode", policy=ExitPolicy.at_layer(0))  # a river row
    assert model.cached_prefix(ids + [1000, 1001]) == len(ids)
    # all but the last, which runs to give the prompt's logits (a row alone: our own
    # attention gives it the bits it has in a cold prefill)
    assert model.cached_prefix(ids) == len(ids) - 1
    assert model.cached_prefix([ids[0] + 1] + ids[1:]) == 0


# ---------------------------------------------------------------- sampling


def _chi_square_quantile(df: int, z: float = 3.09) -> float:
    """The chi-square quantile at the normal quantile z (3.09: 0.999), Wilson-Hilferty."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _chi_square(observed: dict, expected: dict, n: int) -> tuple[float, int]:
    """Pearson's statistic over cells of expected count >= 5 (the rest pooled) and its df."""
    big = [c for c, p in expected.items() if p * n >= 5]
    stat, pooled_obs, pooled_exp = 0.0, n, n
    for cell in big:
        e = expected[cell] * n
        stat += (observed.get(cell, 0) - e) ** 2 / e
        pooled_obs -= observed.get(cell, 0)
        pooled_exp -= e
    if pooled_exp >= 5:
        stat += (pooled_obs - pooled_exp) ** 2 / pooled_exp
        return stat, len(big)
    return stat, len(big) - 1


SAMPLING = dict(temperature=1.0, top_k=5, top_p=1.0, min_p=0.0)


def _exact_joint(model: RiverModel, prompt_ids: list[int]) -> dict:
    """The backbone's probability of each first two tokens under SAMPLING."""
    sampler = Sampler(SamplingParams(**SAMPLING))
    model.reset()
    first = model.forward(prompt_ids, route="backbone")[-1]
    joint = {}
    ids1, p1 = sampler.distribution(first, prompt_ids)
    for t1, q1 in zip(ids1, p1):
        model.reset()
        second = model.forward(prompt_ids + [int(t1)], route="backbone")[-1]
        ids2, p2 = sampler.distribution(second, prompt_ids + [int(t1)])
        for t2, q2 in zip(ids2, p2):
            joint[(int(t1), int(t2))] = float(q1 * q2)
    return joint


@pytest.mark.parametrize("draft_kind", ["river", "river-small-vocab", "other-model", "ngram", "river+ngram"])
@pytest.mark.slow
def test_sampled_tokens_follow_the_backbones_distribution(model, make_tiny_gguf, draft_kind):
    """2000 seeded speculative samples of (t1, t2): t2 comes out of a kept draft or its
    replacement. Chi-square at 0.999 against the backbone's exact joint distribution;
    the same test rejects the draft's own joint distribution, so it can fail. With a
    small draft vocabulary the tokens it cannot propose come only from replacements.
    The n-gram drafts' prompt repeats two of its tokens at its end, so that they match
    (the prompt said twice would make the tiny model's next tokens nearly certain);
    in the portfolio a round may be the river's, a match's, or the river's with a
    match copied after its first token."""
    n = 2000
    prompt_ids = model.tokenize(PROMPT, add_bos=True, special=True)
    if "ngram" in draft_kind:
        prompt_ids = prompt_ids + prompt_ids[1:3]
    expected = _exact_joint(model, prompt_ids)
    draft = None
    if draft_kind == "other-model":
        draft = RiverModel(make_tiny_gguf("draft_sampling", seed=11), n_ctx=N_CTX, n_threads=1, river=None)
    vocab = model.n_vocab // 2 if draft_kind == "river-small-vocab" else None
    if vocab is not None:  # the draft cannot propose a good share of the second tokens
        assert sum(p for (_, t2), p in expected.items() if t2 >= vocab) > 0.1
    name = draft_kind if "ngram" in draft_kind else "river"
    spec = Speculative(draft=draft or name, max_draft=2, adaptive=False, draft_vocab=vocab)
    observed: dict = {}
    model.reset()
    try:
        for seed in range(n):
            result = model.generate(prompt_ids, max_tokens=2, seed=seed, speculative=spec, **SAMPLING)
            cell = tuple(result.token_ids[:2])
            observed[cell] = observed.get(cell, 0) + 1
    finally:
        if draft is not None:
            draft.close()
    stat, df = _chi_square(observed, expected, n)
    assert stat < _chi_square_quantile(df), f"chi-square {stat:.1f} with {df} df"


@pytest.mark.parametrize("draft", ["river+ngram", "river", "ngram", "other-model"])
def test_sampled_speculative_tokens_are_the_plain_runs_for_the_same_seed(model, make_tiny_gguf, draft):
    """Each token is the backbone's sample with its position's seeded draw, drafted or
    not: a speculative run and a plain one with the same seed emit the same tokens.
    The prompt repeats itself, so that n-gram matches draft too."""
    prompt_ids = model.tokenize(PROMPT, add_bos=True, special=True) * 2
    other = None
    if draft == "other-model":
        other = RiverModel(make_tiny_gguf("draft_sampling", seed=11), n_ctx=N_CTX, n_threads=1, river=None)
    spec = Speculative(draft=other or draft, max_draft=3, adaptive=False)
    options = dict(max_tokens=24, temperature=0.8, top_k=20, top_p=0.95, min_p=0.0)
    drafted = accepted = 0
    try:
        for seed in range(6):
            plain = model.generate(prompt_ids, seed=seed, speculative=False, **options)
            fast = model.generate(prompt_ids, seed=seed, speculative=spec, **options)
            assert fast.token_ids == plain.token_ids, f"seed {seed}"
            drafted += fast.speculative.drafted
            accepted += fast.speculative.accepted
    finally:
        if other is not None:
            other.close()
    assert drafted > accepted  # drafts were replaced
    if other is None:  # the other model's random weights hardly ever agree with the backbone
        assert accepted > 0


def test_lookup_drafts_are_as_long_as_max_lookup_and_river_drafts_as_max_draft(model):
    """A context that repeats itself: the n-gram rounds draft up to max_lookup tokens
    (past max_draft), the river's up to max_draft, and the tokens stay the backbone's."""
    prompt_ids = model.tokenize(PROMPT, add_bos=True, special=True) * 3
    expected = backbone_greedy(model, prompt_ids, 40)
    for draft, most in (("ngram", 10), ("river", 2)):
        model.reset()
        spec = Speculative(draft=draft, max_draft=2, max_lookup=10, adaptive=False)
        result = model.generate(prompt_ids, max_tokens=40, speculative=spec)
        assert_backbone_tokens(model, prompt_ids, expected, result.token_ids)
        rounds = sum(s.rounds for name, s in result.speculative.by_source.items() if name != "plain")
        assert rounds and result.speculative.drafted <= most * rounds
        if draft == "ngram":
            assert result.speculative.drafted > 2 * rounds


def test_the_sampling_test_can_fail(model, make_tiny_gguf):
    """The other model's own first-token distribution, as counts, fails the same test:
    a loop that returned draft samples unchanged would be caught."""
    n = 2000
    prompt_ids = model.tokenize(PROMPT, add_bos=True, special=True)
    exact_first: dict = {}
    for (t1, _), p in _exact_joint(model, prompt_ids).items():
        exact_first[t1] = exact_first.get(t1, 0.0) + p
    sampler = Sampler(SamplingParams(**SAMPLING))
    with RiverModel(make_tiny_gguf("draft_sampling", seed=11), n_ctx=N_CTX, n_threads=1, river=None) as draft:
        ids, probs = sampler.distribution(draft.forward(prompt_ids, route="backbone")[-1], prompt_ids)
    draft_counts = {int(t): float(p) * n for t, p in zip(ids, probs)}
    stat, df = _chi_square(draft_counts, exact_first, n)
    assert stat > _chi_square_quantile(df)


# ---------------------------------------------------------------- draft length


def _feed(
    length: DraftLength,
    *,
    rounds: int,
    acceptance: float,
    draft_cost: float,
    verify_one: float = 1.0,
    verify_slope: float = 0.0,
    verify: Optional[Callable[[int], float]] = None,
) -> list[int]:
    """Simulated rounds with deterministic costs; the lengths chosen. The verify of n
    positions costs verify(n), or verify_one * (1 + verify_slope * (n - 1))."""
    verify = verify or (lambda n: verify_one * (1 + verify_slope * (n - 1)))
    chosen = []
    for _ in range(rounds):
        _, k = length.choose(1000, {"river": length.max_draft})
        chosen.append(k)
        accepted = 0
        while accepted < k and (accepted + 1) <= round(acceptance * k + 1e-9):
            accepted += 1
        length.observe(
            n_drafted=k,
            n_accepted=min(accepted, k),
            draft_seconds=k * draft_cost,
            verify_seconds=verify(k + 1),
            draft_forwards=k,
        )
    return chosen


def _drafts_long(chosen: list[int], at_least: int = 6) -> bool:
    """Every round drafts at least `at_least` tokens, but for a plain one now and then
    that re-times one position (one per DraftLength._RETIME_EVERY rounds)."""
    plain = chosen.count(0)
    return plain <= len(chosen) // DraftLength._RETIME_EVERY + 1 and min(k for k in chosen if k) >= at_least


def test_draft_length_stops_drafting_when_it_does_not_pay():
    length = DraftLength(8, adaptive=True)
    chosen = _feed(length, rounds=100, acceptance=0.0, draft_cost=0.6, verify_one=1.0, verify_slope=0.8)
    tail = chosen[50:]
    assert tail.count(0) >= len(tail) - 2  # plain decoding, with a rare probe


def test_draft_length_probes_less_often_while_drafting_does_not_pay():
    """Probes back off (32, 64, then 128 rounds apart) but still notice when drafting
    starts to pay."""
    length = DraftLength(8, adaptive=True)
    costs = dict(draft_cost=0.2, verify_one=1.0, verify_slope=0.1)
    chosen = _feed(length, rounds=1000, acceptance=0.0, **costs)
    probes = [i for i, k in enumerate(chosen) if k > 0 and i > 2]
    assert 8 <= len(probes) <= 10, probes  # 1000 / 128 and the first, shorter waits
    assert probes[-1] - probes[-2] >= 2 * (probes[1] - probes[0])
    resumed = _feed(length, rounds=300, acceptance=1.0, **costs)
    assert _drafts_long(resumed[-50:])


def test_draft_length_drafts_long_when_acceptance_is_high():
    length = DraftLength(8, adaptive=True)
    chosen = _feed(length, rounds=60, acceptance=1.0, draft_cost=0.2, verify_one=1.0, verify_slope=0.1)
    assert _drafts_long(chosen[20:]), chosen


def test_draft_length_finds_long_drafts_behind_a_step_in_the_verify_cost():
    """Measured verify costs step up from 1 position to 2 and then flatten (0.5B F16:
    1.6-1.8x, then barely more up to 5). Extrapolating the first sizes must not keep
    the length short: here 8 drafted tokens give the most tokens per second."""
    length = DraftLength(8, adaptive=True)
    chosen = _feed(
        length, rounds=80, acceptance=0.95, draft_cost=0.4, verify=lambda n: 1.0 if n == 1 else 1.7 + 0.05 * (n - 2)
    )
    assert _drafts_long(chosen[30:]), chosen


def test_one_accepted_probe_does_not_outweigh_the_rounds_before_it():
    """Ten rounds accepted 2 of 4 drafts; after 32 plain rounds one probe's accepted
    token must not set the acceptance near 1 (the next round would draft long)."""
    length = DraftLength(8, adaptive=True)

    def round_(n_drafted: int, n_accepted: int) -> None:
        length.choose(1000, {"river": length.max_draft})
        length.observe(
            n_drafted=n_drafted,
            n_accepted=n_accepted,
            draft_seconds=0.3 * n_drafted,
            verify_seconds=1.0 + 0.6 * (n_drafted > 0),
            draft_forwards=n_drafted,
        )

    for _ in range(10):
        round_(4, 2)
    assert length.acceptance == pytest.approx(2 / 3, abs=0.05)
    for _ in range(32):
        round_(0, 0)
    round_(1, 1)
    assert length.acceptance < 0.75


def _slow_start(slow_plain_rounds: int):
    """Verify costs where drafting never pays at acceptance 0.7 (a demo-like curve), but
    the first `slow_plain_rounds` one-position verifies take three times as long (a
    graph being built, a busy machine)."""
    plain_calls = []

    def verify(n: int) -> float:
        if n == 1:
            plain_calls.append(n)
            return 3.0 if len(plain_calls) <= slow_plain_rounds else 1.0
        return 1.9 + 0.15 * (n - 2)

    return verify


def test_one_slow_first_token_does_not_make_drafting_look_good():
    length = DraftLength(8, adaptive=True)
    chosen = _feed(length, rounds=200, acceptance=0.7, draft_cost=0.55, verify=_slow_start(1))
    assert sum(k > 0 for k in chosen) <= 6, chosen  # the first draft and the probes


def test_draft_length_re_times_one_position_while_drafting():
    """A one-position cost timed while the machine was slow makes drafting look good;
    drafting rounds then never time it again unless a plain round now and then does."""
    length = DraftLength(8, adaptive=True)
    chosen = _feed(length, rounds=400, acceptance=0.7, draft_cost=0.55, verify=_slow_start(3))
    assert sum(k > 0 for k in chosen[:100]) > 80, chosen  # drafting, on the slow timings
    assert sum(k > 0 for k in chosen[-100:]) <= 3, chosen  # re-timed: plain, with probes


def test_draft_length_tries_a_size_again_after_one_slow_verify():
    """One stalled verify (another process, a page fault) must not rule its size out
    for good: with a cheap draft that is always accepted, drafting goes on."""
    length = DraftLength(8, adaptive=True)
    stalled: list[int] = []

    def verify(n: int) -> float:
        if n > 1 and not stalled:
            stalled.append(n)
            return 20.0
        return 1.0 + 0.1 * (n - 1)

    chosen = _feed(length, rounds=40, acceptance=1.0, draft_cost=0.2, verify=verify)
    assert stalled and _drafts_long(chosen[6:], at_least=4), chosen


def test_draft_length_is_learned_once_per_model_and_draft(model, tiny_llama):
    """A second generation starts from the costs and acceptance the first one learned;
    another draft length, thread count or model learns its own; a fixed length keeps
    nothing."""
    spec = Speculative(max_draft=4)
    model.reset()
    model.generate(PROMPT, max_tokens=12, speculative=spec)
    backbone = model.backbone  # what the loop runs on, and learns for
    learned = draft_length_for(backbone, spec, greedy=True)
    assert learned._rounds > 0
    assert draft_length_for(backbone, Speculative(max_draft=4), greedy=True) is learned
    assert draft_length_for(backbone, Speculative(max_draft=5), greedy=True) is not learned
    assert draft_length_for(backbone, spec, greedy=False) is not learned
    fixed = Speculative(max_draft=4, adaptive=False)
    assert draft_length_for(backbone, fixed, greedy=True) is not draft_length_for(backbone, fixed, greedy=True)
    with RiverModel(tiny_llama, n_ctx=N_CTX, n_threads=1, river="q4_0") as other:
        assert draft_length_for(other.backbone, spec, greedy=True) is not learned


def test_draft_length_grows_at_most_twofold_into_unmeasured_lengths():
    """A free verify and a cheap, always accepted draft: the length doubles (2, 4, 8)
    instead of jumping to the longest on an optimistic guess."""
    length = DraftLength(8, adaptive=True)
    chosen = _feed(length, rounds=6, acceptance=1.0, draft_cost=0.05, verify=lambda n: 1.0)
    assert chosen == [0, 0, 0, 2, 4, 8], chosen  # three plain rounds time one position first


def test_fixed_draft_length():
    length = DraftLength(5, adaptive=False)
    offers = {"river": length.max_draft}
    assert [length.choose(100, offers) for _ in range(3)] == [("river", 5)] * 3
    assert length.choose(2, offers) == ("river", 2)


# ---------------------------------------------------------------- options


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(max_draft=0), "max_draft"),
        (dict(max_draft=1.5), "max_draft"),
        (dict(max_lookup=0), "max_lookup"),
        (dict(max_lookup=65), "max_lookup"),
        (dict(p_min=1.0), "p_min"),
        (dict(p_min=float("nan")), "p_min"),
        (dict(draft="tiny"), "draft"),
        (dict(draft_vocab=0), "draft_vocab"),
        (dict(draft_vocab=True), "draft_vocab"),
    ],
)
def test_invalid_options(options, message):
    with pytest.raises(ValueError, match=message):
        Speculative(**options)


def test_river_draft_needs_a_river(tiny_llama):
    with RiverModel(tiny_llama, n_ctx=N_CTX, n_threads=1, river=None) as plain:
        for draft in ("river", "river+ngram"):
            with pytest.raises(ValueError, match="river"):
                plain.generate(PROMPT, max_tokens=4, speculative=Speculative(draft=draft))
        # speculative=True asks for the default draft of what the model has: n-gram matches
        drafted = plain.generate(PROMPT, max_tokens=4, speculative=True)
        assert drafted.speculative is not None
        assert drafted.token_ids == plain.generate(PROMPT, max_tokens=4, speculative=False).token_ids


def test_speculative_option_type(model):
    with pytest.raises(TypeError, match="speculative"):
        model.generate(PROMPT, max_tokens=4, speculative="yes")


class _SuccessorModel:
    """Stands in for a backbone whose every position predicts successor[token]: greedy
    decoding follows that chain, and a verify scores drafts at every position."""

    n_ctx, n_layer, n_threads, has_river = 256, 2, 1, False
    policy = ExitPolicy.never()

    def __init__(self, successor: dict[int, int], n_vocab: int = 16) -> None:
        self.successor, self.n_vocab, self.n_past = successor, n_vocab, 0
        self.last_exit_layers = np.zeros(0, dtype=np.int32)

    def reset(self) -> None:
        self.n_past = 0

    def rewind(self, n_past: int) -> None:
        self.n_past = n_past

    def check_policy(self, policy: ExitPolicy) -> None:
        pass

    def cached_prefix(self, ids, *, route="prompt", policy=None) -> int:
        return 0

    def reuse_prefix(self, ids, *, route="prompt", policy=None) -> int:  # nothing is kept
        self.rewind(0)
        return 0

    def forward(self, ids, *, last_only=False, route="auto", policy=None, exit_vocab=None, prompt=False) -> np.ndarray:
        self.n_past += len(ids)
        self.last_exit_layers = np.full(len(ids), self.n_layer, dtype=np.int32)
        logits = np.zeros((len(ids), self.n_vocab), dtype=np.float32)
        logits[np.arange(len(ids)), [self.successor[int(t)] for t in ids]] = 1.0
        return logits[-1:] if last_only else logits


def test_ngram_offers_a_round_did_not_draft_are_scored_against_its_emitted_tokens(monkeypatch):
    """The adaptive controller scores the n-gram offers it does not draft against the
    tokens each round emitted (DraftLength.observe_unused), for free. The prompt
    1 2 3 4 5 1 2 3 repeats itself; the backbone goes on 4 5 9 10 11 ... A new
    controller decodes its first rounds plainly (to time them), so those rounds' offers
    go undrafted and are scored."""
    scored = []
    observe_unused = DraftLength.observe_unused

    def spy(self, source, proposed, agreeing, emitted):
        scored.append((source, proposed, agreeing, emitted))
        observe_unused(self, source, proposed, agreeing, emitted)

    monkeypatch.setattr(DraftLength, "observe_unused", spy)
    chain = {1: 2, 2: 3, 3: 4, 4: 5, 5: 9, 9: 10, 10: 11, 11: 12, 12: 13, 13: 14, 14: 15, 15: 15}
    model = _SuccessorModel(chain)
    prompt = [1, 2, 3, 4, 5, 1, 2, 3]
    steps = speculative_step(
        model, prompt, Sampler(SamplingParams(temperature=0.0)), Speculative(draft="ngram", ngram_max=3, max_lookup=8)
    )
    tokens = [step.token for _, step in zip(range(6), steps)]
    assert tokens == [4, 5, 9, 10, 11, 12]
    # Round 1, after the first token 4: (2, 3, 4) occurred before 5 1 2 3 4, offered as
    # 8 tokens (repeating), and the plain round emits 5: one agrees. Round 2, after
    # (3, 4, 5), offers 1 2 3 4 5 ... and emits 9: none agrees.
    assert scored[0] == ("ngram3", 8, 1, 1)
    assert scored[1] == ("ngram3", 8, 0, 1)
