"""How many requests `serve --parallel auto` runs at once (river_cpp.engine.decisions.parallel_choice):
as many as a batched step serves for less than their separate steps. Decided on verify
curves handed in, never on this machine's clock."""

import argparse

import pytest

from river_cpp.engine.decisions import river_choice
from river_cpp.engine.decisions.parallel_choice import AUTO_MOST, PAYS, choose_parallel, weigh_parallel
from river_cpp.engine.decisions.river_choice import Timings, choose_river

# A 4-bit backbone on 2 cores: a batch of 4 columns costs well under 4 steps.
STEEP = Timings({1: 1.0, 2: 1.6, 4: 1.8, 6: 2.5, 9: 3.1})
# Products that run column by column (a type without a batched kernel): k columns cost k steps.
COLUMN_BY_COLUMN = Timings({1: 1.0, 2: 2.0, 4: 4.0, 6: 6.0, 9: 9.0})


def test_a_curve_that_pays_runs_every_slot_asked_for():
    choice = weigh_parallel(AUTO_MOST, STEEP.verify_cost)
    assert choice.slots == AUTO_MOST and choice.costs[4] == pytest.approx(1.8)
    assert choice.describe() == (
        "parallel: 4 slots: a step batched over 4 sequences costs 1.80 plain steps, 0.45 of a step each"
    )


def test_batches_that_cost_their_separate_steps_are_served_one_at_a_time():
    choice = weigh_parallel(AUTO_MOST, COLUMN_BY_COLUMN.verify_cost)
    assert choice.slots == 1
    line = choice.describe()
    assert "parallel: 1 slot: a step batched over 4 sequences costs 4.00 plain steps" in line
    assert f"batching pays below {PAYS:.2f}" in line and "--parallel 4 batches them anyway" in line


def test_the_most_sequences_that_still_pay():
    # two sequences share a step well, a third and fourth nearly cost their own
    curve = Timings({1: 1.0, 2: 1.5, 3: 2.85, 4: 3.9})
    assert weigh_parallel(4, curve.verify_cost).slots == 2
    assert weigh_parallel(1, curve.verify_cost).describe() == "parallel: 1 slot, as asked"
    with pytest.raises(ValueError, match="positive number of sequences"):
        weigh_parallel(0, curve.verify_cost)


def _timer(curve: Timings, calls: list):
    """A stand-in for river_choice.time_costs: `curve` for the backbone, a drafted token
    at a whole step for any river (none pays)."""

    def timer(path, river_types, *, n_threads):
        calls.append(tuple(river_types))
        return curve if not river_types else Timings({1: 1.0}, {river_types[0]: 1.0})

    return timer


def _timed_once(model, curve: Timings) -> list:
    """choose_river's first timing of `model` on 2 threads, as its first load does: the
    timer's calls (the load during it unknown, so it is cached)."""
    river_choice._provisional.clear()
    calls: list = []
    choose_river(model, n_threads=2, timer=_timer(curve, calls), cpu_ticks=lambda: None)
    return calls


def test_the_choice_reads_the_river_choices_timing(tiny_llama4, river_cache):
    """One timing per file and host serves both decisions: choose_river's curve, cached,
    is the one choose_parallel weighs, with no second timing."""
    calls = _timed_once(tiny_llama4, STEEP)
    timed = len(calls)
    assert choose_parallel(tiny_llama4, n_threads=2, timer=_timer(STEEP, calls)).slots == AUTO_MOST
    assert len(calls) == timed


def test_serve_auto_says_its_choice_and_runs_its_slots(tiny_llama4, river_cache, capsys):
    from river_cpp.apps.cli.serve import _auto_parallel

    _timed_once(tiny_llama4, COLUMN_BY_COLUMN)
    args = argparse.Namespace(model=str(tiny_llama4), hf_repo=None, engine="auto", threads=2)
    assert _auto_parallel(args) == 1
    assert "river-cpp serve: parallel: 1 slot: a step batched over 4 sequences" in capsys.readouterr().err
