"""The default's river: one that pays on the file, or none (river_cpp.engine.decisions.river_choice).

The decision is tested on timings handed in, never on this machine's clock."""

import json
import os
import time
from typing import Optional

import pytest

from river_cpp import RiverModel, Speculative
from river_cpp._cpus import CpuTicks
from river_cpp.engine.decisions import river_choice
from river_cpp.engine.decisions.river_choice import (
    ACCEPTANCE,
    MIN_SPEEDUP,
    Timings,
    choose_river,
    file_bytes,
    weigh,
)
from river_cpp.engine.files.river import RiverSpec, river_cache_path

# A CPU's verify curves: one that steps steeply (a 4-bit backbone on 2 cores) and a
# flat one (a GPU, or a memory-bound F16 backbone).
STEEP = {1: 1.0, 2: 1.6, 4: 1.7, 6: 2.5, 9: 2.6}
FLAT = {1: 1.0, 2: 1.05, 9: 1.4}
RIVER_BYTES = {"iq4_nl": 900, "q3_k": 700, "q2_k": 560}


def test_the_verify_curve_interpolates_and_extends():
    curve = Timings({1: 1.0, 2: 1.5, 4: 2.0})
    assert curve.verify_cost(3) == pytest.approx(1.75)
    assert curve.verify_cost(6) == pytest.approx(2.5)  # the last step's slope, 0.25 a position


def test_a_four_bit_backbone_on_a_steep_verify_gets_no_river():
    # a 4-bit river reads 0.9 of a Q4_K_M backbone's bytes, a 2-bit one 0.56: where a
    # verify of 2 positions costs 1.6 steps, none pays even at its bytes
    choice = weigh("Q4_K", 1000, RIVER_BYTES, Timings(STEEP))
    assert choice.river is None
    assert "no river would be faster than plain decoding on this Q4_K backbone" in choice.reason
    assert all(c.speedup < MIN_SPEEDUP for c in choice.candidates)


def test_a_river_that_pays_on_bytes_is_chosen_only_once_timed():
    backbone = 3200  # an F16 backbone: a 4-bit river reads about 0.28 of its bytes
    untimed = weigh("F16", backbone, RIVER_BYTES, Timings(FLAT))
    assert untimed.river is None and any(c.pays for c in untimed.candidates)
    assert "by its size, but was not timed yet" in untimed.reason
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
    assert first.river is None and first.reason.startswith("iq4_nl would be faster")  # the best accepted, untimed
    both = weigh("F16", backbone, RIVER_BYTES, Timings(FLAT, {"q2_k": 0.2, "iq4_nl": 0.4}))
    speed = {c.river: c.speedup for c in both.candidates}
    assert speed["q2_k"] > speed["iq4_nl"] >= MIN_SPEEDUP and both.river == "iq4_nl"
    fallback = weigh("F16", backbone, RIVER_BYTES, Timings(FLAT, {"iq4_nl": 1.0, "q3_k": 1.0, "q2_k": 0.2}))
    assert fallback.river == "q2_k"  # a cheaper type where the better ones do not pay


def test_a_timing_faster_than_the_bytes_counts_as_the_bytes():
    choice = weigh("Q8_0", 1000, RIVER_BYTES, Timings(STEEP, {"q2_k": 0.01}))
    q2_k = next(c for c in choice.candidates if c.river == "q2_k")
    assert q2_k.cost == pytest.approx(0.56)


class _Ticks:
    """cpu_ticks of a 2-CPU machine where this process keeps one CPU busy and other
    processes `others` CPUs (what river_cpp._cpus.read_cpu_ticks reads), each reading
    `seconds` after the one before."""

    def __init__(self, others: float, seconds: float = 1.0) -> None:
        self.others, self.seconds = others, seconds
        self.reading: Optional[CpuTicks] = None

    def __call__(self) -> CpuTicks:
        last, ticks = self.reading, round(100 * self.seconds)  # clock ticks of one CPU
        if last is None:
            self.reading = CpuTicks(2, busy=0, total=0, own=0)
        else:
            busy = last.busy + ticks + round(ticks * self.others)
            self.reading = CpuTicks(2, busy, last.total + 2 * ticks, last.own + ticks)
        return self.reading


def _quiet() -> _Ticks:
    return _Ticks(others=0.0)


def _next_process() -> None:
    """What a new process starts with: no provisional timings of its own."""
    river_choice._provisional.clear()


def _counting(timings_by_call):
    calls = []

    def timer(path, river_types, *, n_threads):
        calls.append(tuple(river_types))
        return timings_by_call(river_types)

    return timer, calls


def test_choose_river_times_once_then_reads_the_cache(tiny_llama4, river_cache):
    timer, calls = _counting(lambda types: Timings(FLAT) if not types else Timings({1: 1.0}, {types[0]: 0.3}))
    first = choose_river(tiny_llama4, n_threads=2, timer=timer, cpu_ticks=_quiet())
    assert first.river in ACCEPTANCE
    assert calls == [(), (first.river,)]  # the curve, then the best type on bytes
    again = choose_river(tiny_llama4, n_threads=2, timer=timer, cpu_ticks=_quiet())
    assert again == first and len(calls) == 2
    choose_river(tiny_llama4, n_threads=1, timer=timer, cpu_ticks=_quiet())  # another thread count is timed anew
    assert len(calls) == 4


def test_retime_times_again_and_replaces_the_cached_timings(tiny_llama4, river_cache):
    """A first timing on a loaded machine (a steep curve) is replaced when asked."""
    steep, _ = _counting(lambda types: Timings(STEEP) if not types else Timings({1: 1.0}, {types[0]: 2.0}))
    assert choose_river(tiny_llama4, n_threads=2, timer=steep, cpu_ticks=_quiet()).river is None
    flat, calls = _counting(lambda types: Timings(FLAT) if not types else Timings({1: 1.0}, {types[0]: 0.3}))
    assert choose_river(tiny_llama4, n_threads=2, timer=flat, cpu_ticks=_quiet()).river is None and calls == []
    retimed = choose_river(tiny_llama4, n_threads=2, timer=flat, retime=True, cpu_ticks=_quiet())
    assert retimed.river in ACCEPTANCE and calls[0] == ()
    _next_process()
    assert choose_river(tiny_llama4, n_threads=2, timer=flat, cpu_ticks=_quiet()) == retimed  # cached


def test_a_changed_file_is_timed_again(tmp_path, tiny_llama4, river_cache):
    model = tmp_path / "model.gguf"
    model.write_bytes(tiny_llama4.read_bytes())
    timer, calls = _counting(lambda types: Timings(STEEP) if not types else Timings({1: 1.0}, {types[0]: 2.0}))
    choose_river(model, n_threads=2, timer=timer, cpu_ticks=_quiet())
    n = len(calls)
    os.utime(model, ns=(1, 1))
    choose_river(model, n_threads=2, timer=timer, cpu_ticks=_quiet())
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

    choice = choose_river(tiny_llama4, n_threads=2, timer=timer, cpu_ticks=_quiet())
    assert choice.river is None
    assert built and not any(p.exists() for p in built)
    recorded = json.loads(next((river_cache / river_choice.CACHE_FOLDER).iterdir()).read_text())
    assert set(recorded["draft_cost"]) == {p.name.split(".river-")[1].split("-")[0] for p in built}


def _cached(river_cache) -> list[dict]:
    folder = river_cache / river_choice.CACHE_FOLDER
    return [json.loads(f.read_text()) for f in folder.iterdir()] if folder.exists() else []


def test_a_timing_on_a_busy_machine_is_used_but_not_cached(tiny_llama4, river_cache):
    """A timing beside a busy process decides for this process only; the next process
    times again, and a quiet timing is cached as the verdict."""
    timer, calls = _counting(lambda types: _no_river_pays(None, types, n_threads=2))
    busy = choose_river(tiny_llama4, n_threads=2, timer=timer, cpu_ticks=_Ticks(others=1.0))
    timed = len(calls)
    assert calls[0] == () and busy.river is None
    assert busy.timings.load == pytest.approx(0.5) and not busy.timings.quiet
    assert _cached(river_cache) == []
    assert choose_river(tiny_llama4, n_threads=2, timer=timer, cpu_ticks=_Ticks(others=1.0)) == busy
    assert len(calls) == timed  # this process keeps its provisional timing
    _next_process()
    quiet = choose_river(tiny_llama4, n_threads=2, timer=timer, cpu_ticks=_quiet())
    assert calls[timed:] == calls[:timed] and quiet.timings.quiet  # timed again, the same way
    (recorded,) = _cached(river_cache)
    assert recorded["load"] == 0.0 and recorded["taken"] == quiet.timings.taken
    _next_process()
    assert choose_river(tiny_llama4, n_threads=2, timer=timer, cpu_ticks=_Ticks(others=1.0)) == quiet
    assert len(calls) == 2 * timed  # the quiet verdict holds, whatever the load now


def test_a_river_timed_on_a_busy_machine_leaves_the_quiet_curve_cached(tiny_llama4, river_cache):
    ticks = _quiet()

    def timer(path, river_types, *, n_threads):
        calls.append(tuple(river_types))
        if not river_types:
            return Timings(FLAT)
        ticks.others = 1.5  # a build started beside the river's timing
        return Timings({1: 1.0}, {river_types[0]: 0.3})

    calls = []
    first = choose_river(tiny_llama4, n_threads=2, timer=timer, cpu_ticks=ticks)
    assert first.river in ACCEPTANCE and calls == [(), (first.river,)] and not first.timings.quiet
    (recorded,) = _cached(river_cache)
    assert recorded["draft_cost"] == {} and recorded["load"] == 0.0  # the curve, not the river's cost
    _next_process()
    again = choose_river(tiny_llama4, n_threads=2, timer=timer, cpu_ticks=_quiet())
    assert calls[2:] == [(first.river,)] and again.river == first.river and again.timings.quiet
    (recorded,) = _cached(river_cache)
    assert set(recorded["draft_cost"]) == {first.river}


def test_a_span_too_short_to_read_the_load_counts_as_quiet(tiny_llama4, river_cache):
    timer, _ = _counting(lambda types: _no_river_pays(None, types, n_threads=2))
    choice = choose_river(tiny_llama4, n_threads=2, timer=timer, cpu_ticks=_Ticks(others=2.0, seconds=0.05))
    assert choice.timings.load is None and choice.timings.quiet
    assert len(_cached(river_cache)) == 1
    assert "load during it is unknown" in choice.describe()


def test_the_choice_says_which_timing_holds_and_when():
    taken = time.mktime((2026, 12, 5, 14, 3, 0, 0, 0, -1))
    provisional = weigh("Q4_K", 1000, RIVER_BYTES, Timings(STEEP, taken=taken, load=0.45))
    line = provisional.describe().splitlines()[-1]
    assert "provisional" in line and "2026-12-05 14:03" in line and "45%" in line and "not cached" in line
    assert provisional.as_dict()["timing"]["cached"] is False
    assert provisional.as_dict()["timing"]["taken"].startswith("2026-12-05T14:03")
    cached = weigh("Q4_K", 1000, RIVER_BYTES, Timings(STEEP, taken=taken, load=0.02))
    line = cached.describe().splitlines()[-1]
    assert line.strip().startswith("timing: cached") and "quiet" in line and "2026-12-05 14:03" in line
    timing = cached.as_dict()["timing"]
    assert timing["cached"] is True and timing["load"] == 0.02
    handed_in = weigh("Q4_K", 1000, RIVER_BYTES, Timings(STEEP))  # no timing of this machine to report
    assert "timing" not in handed_in.describe() and handed_in.as_dict()["timing"] is None


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
