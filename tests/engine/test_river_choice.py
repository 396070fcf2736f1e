"""The default's river: one that pays on the file, or none (river_cpp.engine.river_choice).

The decision is tested on timings handed in, never on this machine's clock."""

import json
import os

import pytest

from river_cpp import RiverModel, Speculative
from river_cpp.engine import river_choice
from river_cpp.engine.river import RiverSpec, river_cache_path
from river_cpp.engine.river_choice import (
    ACCEPTANCE,
    MIN_SPEEDUP,
    Timings,
    choose_river,
    expected_speedup,
    file_bytes,
    weigh,
)

# A CPU's verify curves: one that steps steeply (a 4-bit backbone on 2 cores) and a
# flat one (a GPU, or a memory-bound F16 backbone).
STEEP = {1: 1.0, 2: 1.6, 4: 1.7, 6: 2.5, 9: 2.6}
FLAT = {1: 1.0, 2: 1.05, 9: 1.4}
RIVER_BYTES = {"iq4_nl": 900, "q3_k": 700, "q2_k": 560}


def test_expected_speedup_is_plain_where_no_length_pays():
    assert expected_speedup(0.9, 0.9, Timings(STEEP).verify_cost) == (0, 1.0)
    k, speedup = expected_speedup(1.0, 0.0, lambda n: 1.0)  # free drafts, always kept, free verify
    assert k == 8 and speedup == pytest.approx(9.0, rel=0.01)


def test_the_verify_curve_interpolates_and_extends():
    curve = Timings({1: 1.0, 2: 1.5, 4: 2.0})
    assert curve.verify_cost(3) == pytest.approx(1.75)
    assert curve.verify_cost(6) == pytest.approx(2.5)  # the last step's slope, 0.25 a position


def test_a_four_bit_backbone_on_a_steep_verify_gets_no_river():
    # a 4-bit river reads 0.9 of a Q4_K_M backbone's bytes, a 2-bit one 0.56: where a
    # verify of 2 positions costs 1.6 steps, none pays even at its bytes
    choice = weigh("Q4_K", 1000, RIVER_BYTES, Timings(STEEP))
    assert choice.river is None
    assert "no river pays on this Q4_K backbone" in choice.reason
    assert all(c.speedup < MIN_SPEEDUP for c in choice.candidates)


def test_a_river_that_pays_on_bytes_is_chosen_only_once_timed():
    backbone = 3200  # an F16 backbone: a 4-bit river reads about 0.28 of its bytes
    untimed = weigh("F16", backbone, RIVER_BYTES, Timings(FLAT))
    assert untimed.river is None and any(c.pays for c in untimed.candidates)
    assert "pay on bytes but were not timed yet" in untimed.reason
    timed = weigh("F16", backbone, RIVER_BYTES, Timings(FLAT, {"iq4_nl": 0.35}))
    assert timed.river == "iq4_nl"
    assert "timed" in timed.reason
    slow = weigh("F16", backbone, RIVER_BYTES, Timings(FLAT, {"iq4_nl": 1.0, "q3_k": 1.0, "q2_k": 1.0}))
    assert slow.river is None  # a drafted token that costs a step never pays


def test_the_best_accepted_type_that_pays_is_chosen_over_a_faster_predicted_one():
    """IQ4_NL is timed first and chosen where it pays, though a cheaper type promises
    more: the cheaper types' acceptance is the less trustworthy figure."""
    backbone = 3200
    first = weigh("F16", backbone, RIVER_BYTES, Timings(FLAT, {"q2_k": 0.3}))
    assert first.river is None and first.reason.startswith("iq4_nl pay")  # the best accepted, untimed
    both = weigh("F16", backbone, RIVER_BYTES, Timings(FLAT, {"q2_k": 0.2, "iq4_nl": 0.4}))
    speed = {c.river: c.speedup for c in both.candidates}
    assert speed["q2_k"] > speed["iq4_nl"] >= MIN_SPEEDUP and both.river == "iq4_nl"
    fallback = weigh("F16", backbone, RIVER_BYTES, Timings(FLAT, {"iq4_nl": 1.0, "q3_k": 1.0, "q2_k": 0.2}))
    assert fallback.river == "q2_k"  # a cheaper type where the better ones do not pay


def test_a_timing_faster_than_the_bytes_counts_as_the_bytes():
    choice = weigh("Q8_0", 1000, RIVER_BYTES, Timings(STEEP, {"q2_k": 0.01}))
    q2_k = next(c for c in choice.candidates if c.river == "q2_k")
    assert q2_k.cost == pytest.approx(0.56)


def _counting(timings_by_call):
    calls = []

    def timer(path, river_types, *, n_threads):
        calls.append(tuple(river_types))
        return timings_by_call(river_types)

    return timer, calls


def test_choose_river_times_once_then_reads_the_cache(tiny_llama4, river_cache):
    timer, calls = _counting(lambda types: Timings(FLAT) if not types else Timings({1: 1.0}, {types[0]: 0.3}))
    first = choose_river(tiny_llama4, n_threads=2, timer=timer)
    assert first.river in ACCEPTANCE
    assert calls == [(), (first.river,)]  # the curve, then the best type on bytes
    again = choose_river(tiny_llama4, n_threads=2, timer=timer)
    assert again == first and len(calls) == 2
    choose_river(tiny_llama4, n_threads=1, timer=timer)  # another thread count is timed anew
    assert len(calls) == 4


def test_retime_times_again_and_replaces_the_cached_timings(tiny_llama4, river_cache):
    """A first timing on a loaded machine (a steep curve) is replaced when asked."""
    steep, _ = _counting(lambda types: Timings(STEEP) if not types else Timings({1: 1.0}, {types[0]: 2.0}))
    assert choose_river(tiny_llama4, n_threads=2, timer=steep).river is None
    flat, calls = _counting(lambda types: Timings(FLAT) if not types else Timings({1: 1.0}, {types[0]: 0.3}))
    assert choose_river(tiny_llama4, n_threads=2, timer=flat).river is None and calls == []  # cached
    retimed = choose_river(tiny_llama4, n_threads=2, timer=flat, retime=True)
    assert retimed.river in ACCEPTANCE and calls[0] == ()
    assert choose_river(tiny_llama4, n_threads=2, timer=flat) == retimed  # the new timings are cached


def test_a_changed_file_is_timed_again(tmp_path, tiny_llama4, river_cache):
    model = tmp_path / "model.gguf"
    model.write_bytes(tiny_llama4.read_bytes())
    timer, calls = _counting(lambda types: Timings(STEEP) if not types else Timings({1: 1.0}, {types[0]: 2.0}))
    choose_river(model, n_threads=2, timer=timer)
    n = len(calls)
    os.utime(model, ns=(1, 1))
    choose_river(model, n_threads=2, timer=timer)
    assert len(calls) == 2 * n


def test_a_river_timed_and_rejected_is_deleted(tiny_llama4, river_cache):
    built = []

    def timer(path, river_types, *, n_threads):
        if not river_types:
            return Timings(FLAT)
        spec = RiverSpec(default_type=river_types[0], head_type=river_choice.HEAD_TYPE)
        path = river_cache_path(tiny_llama4, spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"a river built to be timed")
        built.append(path)
        return Timings({1: 1.0}, {river_types[0]: 1.5})  # slower than a backbone step

    choice = choose_river(tiny_llama4, n_threads=2, timer=timer)
    assert choice.river is None
    assert built and not any(p.exists() for p in built)
    recorded = json.loads(next((river_cache / river_choice.CACHE_FOLDER).iterdir()).read_text())
    assert set(recorded["draft_cost"]) == {p.name.split(".river-")[1].split("-")[0] for p in built}


def test_file_bytes_reads_the_tensor_table(tiny_llama4):
    backbone_type, backbone_bytes, rivers = file_bytes(tiny_llama4)
    assert backbone_type == "F16"
    # its rows (64, 128) are no multiples of a K-quant's 256: those take IQ4_NL, as the builder does
    assert rivers["q2_k"] == rivers["q3_k"] == rivers["iq4_nl"] < backbone_bytes


def test_a_k_quant_river_row_of_another_length_is_weighed_as_iq4_nl():
    assert river_choice._river_bytes((896, 10), "q2_k") == river_choice._river_bytes((896, 10), "iq4_nl")
    assert river_choice._river_bytes((1024, 10), "q2_k") == 1024 * 10 * 2.625 / 8


def _no_river_pays(path, river_types, *, n_threads):
    return Timings(STEEP) if not river_types else Timings({1: 1.0}, dict.fromkeys(river_types, 1.0))


def test_where_no_river_pays_the_default_maps_none(tiny_llama4, river_cache, monkeypatch):
    monkeypatch.setattr(river_choice, "time_costs", _no_river_pays)
    with RiverModel(tiny_llama4, n_ctx=32) as model:
        assert not model.has_river and model.river_path is None
        assert model.river_choice is not None and model.river_choice.river is None
        assert model.speculative == Speculative(draft="ngram")
        text = model.generate("Hello", max_tokens=4).text
    with RiverModel(tiny_llama4, n_ctx=32, river=None, speculative=False) as plain:
        assert plain.generate("Hello", max_tokens=4).text == text
    assert not (river_cache / "rivers").exists() or not any((river_cache / "rivers").iterdir())


def test_an_explicit_river_wins(tiny_llama4, river_cache, monkeypatch):
    monkeypatch.setattr(river_choice, "time_costs", _no_river_pays)
    with RiverModel(tiny_llama4, n_ctx=32, river="q4_0") as model:
        assert model.has_river and model.river_choice is None
        assert "q4_0" in model.river_path.name


def test_a_lossy_policy_gets_a_river_whether_drafting_pays_or_not(tiny_llama4, river_cache, monkeypatch):
    from river_cpp import ExitPolicy

    monkeypatch.setattr(river_choice, "time_costs", _no_river_pays)
    with RiverModel(tiny_llama4, n_ctx=32, policy=ExitPolicy.at_layer(0)) as model:
        assert model.has_river and model.river_choice is None


def test_the_real_timing_runs_on_the_graph_backbone(tiny_llama4, river_cache):
    """time_costs itself (the other tests hand the choice fixed timings): the backbone's
    verify curve and one river type's drafted token, on a GraphBackbone of its own."""
    from conftest import REAL_TIME_COSTS

    curve = REAL_TIME_COSTS(tiny_llama4, (), n_threads=1)
    assert curve.verify[1] == 1.0 and all(v >= 1.0 for v in curve.verify.values()) and len(curve.verify) > 2
    costs = REAL_TIME_COSTS(tiny_llama4, ("q2_k",), n_threads=1)
    assert costs.draft_cost["q2_k"] > 0
