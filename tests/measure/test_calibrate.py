"""Choosing exit thresholds: the search, the per-layer policy, and the command."""

from __future__ import annotations

import math

import numpy as np
import pytest

from river_cpp import RiverModel
from river_cpp.apps.cli import main
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.measure.calibrate import PER_LAYER, UNIFORM, Target, Trial, bisect, calibrate, signal_quantile_policy
from river_cpp.measure.comparison import Workload, forced_positions, reference_run
from river_cpp.measure.evaluate import QualityReport

pytestmark = pytest.mark.usefixtures("river_cache")


def report_with_top1(rate: float) -> QualityReport:
    """A report of 100 positions of which round(100 * rate) share the top-1."""
    logits = np.zeros((100, 2))
    logits[:, 0] = 1.0
    other = logits.copy()
    other[int(round(100 * rate)) :] = [0.0, 1.0]
    return QualityReport.compare(logits, other)


def test_target_needs_exactly_one_sensible_goal():
    for bad in [
        {},
        {"top1": 0.9, "max_kld": 0.1},
        {"top1": 1.5},
        {"top1": 0.0},
        {"max_kld": -1.0},
        {"max_kld": math.inf},
    ]:
        with pytest.raises(ValueError):
            Target(**bad)
    assert Target(top1=0.9).met(report_with_top1(0.9)) and not Target(top1=0.9).met(report_with_top1(0.89))
    assert Target(max_kld=0.0).met(report_with_top1(1.0)) and not Target(max_kld=0.01).met(report_with_top1(0.5))


def test_bisect_finds_the_smallest_parameter_that_meets_the_target():
    seen = []

    def measure(x: float) -> Trial:  # quality rises with x; the target is met from x = 0.7 on
        seen.append(x)
        return Trial(UNIFORM, x, ExitPolicy.never(), report_with_top1(0.5 + 0.5 * (x >= 0.7)), 10 * x)

    trials = bisect(measure, Target(top1=0.9), 0.0, 1.0, steps=8)
    meeting = [t.parameter for t in trials if t.parameter >= 0.7]
    assert min(meeting) - 0.7 < 1.0 / 2**8
    assert 1.0 not in seen  # the never-exiting end is not needed when a trial meets the target
    trials = bisect(measure, Target(top1=0.9), 0.0, 0.5, steps=3)
    assert trials[-1].parameter == 0.5 and len(trials) == 5  # nothing met: the high end is measured


def test_signal_quantile_policy():
    signals = np.array([[np.nan, 0.90, 0.95, 0.99], [np.nan, 0.80, 0.97, 0.98], [np.nan, 0.70, 0.93, np.nan]])
    policy = signal_quantile_policy(signals, 0.5, min_layer=2, signal="update_norm")
    assert policy.resolve(4) == [math.inf, math.inf, 0.95, 0.985]
    assert policy.signal == "update_norm"
    assert signal_quantile_policy(signals, 1.0, min_layer=1, signal="cosine").resolve(4)[1:] == [0.90, 0.97, 0.99]


@pytest.fixture
def tiny_work(tiny_llama4) -> Workload:
    with RiverModel(tiny_llama4, river=None) as model:
        tokens = model.tokenize("The river ran down to the sea, and the boats went out with the tide " * 8)
    chunks = [tokens[i : i + 25] for i in range(0, 75, 25)]
    return Workload(chunks, 8, [], 1)


@pytest.mark.slow
def test_calibrated_policy_meets_its_target_on_the_calibration_set(tiny_llama4, tiny_work):
    target = Target(top1=0.8)
    with RiverModel(tiny_llama4, river="q4_0", n_ctx=64) as model:
        result = calibrate(model, tiny_work, target, min_layer=1, steps=4)
        assert {t.family for t in result.trials} == {UNIFORM, PER_LAYER}
        assert result.chosen.mean_exit == min(t.mean_exit for t in result.trials if target.met(t.report))
        assert result.policy == result.chosen.policy
        assert model.policy == ExitPolicy.never()  # the choice is returned, not left on the model
        # measured afresh, the chosen policy keeps the target
        reference, _ = reference_run(model, tiny_work)
        positions, exits = forced_positions(model, tiny_work, reference, policy_for=lambda c: result.policy)
    assert target.met(QualityReport.from_positions(positions))
    assert exits.mean() == pytest.approx(result.chosen.mean_exit)


@pytest.mark.slow
def test_calibrate_command_writes_a_policy_generate_accepts(tiny_llama4, tmp_path, capsys):
    corpus = tmp_path / "one.txt"  # one.txt and two.txt fall on different sides of the split
    corpus.write_text("A river carries water from the hills to the sea. " * 40)
    (tmp_path / "two.txt").write_text("Boats float on the river and fish swim below them. " * 40)
    policy = tmp_path / "policy.json"
    argv = [
        "calibrate",
        "-m",
        str(tiny_llama4),
        "--target-top1",
        "0.8",
        "--corpus",
        str(corpus),
        str(tmp_path / "two.txt"),
        "--tokens",
        "64",
        "--steps",
        "2",
        "--min-layer",
        "1",
        "-o",
        str(policy),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "held out" in out and "| uniform |" in out
    loaded = ExitPolicy.load(policy)
    assert main(["generate", "Hi", "-m", str(tiny_llama4), "-n", "3", "--policy", str(policy)]) == 0
    assert loaded.signal == "cosine"


@pytest.mark.parametrize("extra", [[], ["--target-top1", "0.9", "--max-kld", "0.1"]])
def test_calibrate_needs_one_target(tiny_llama4, extra):
    with pytest.raises(SystemExit):
        main(["calibrate", "-m", str(tiny_llama4), *extra])


@pytest.mark.parametrize(
    "extra",
    [
        ["--target-top1", "2"],
        ["--max-kld", "0.1", "--steps", "0"],
        ["--max-kld", "0.1", "-o", "/no/such/folder/policy.json"],
    ],
)
def test_calibrate_errors_are_one_line(tiny_llama4, extra, capsys):
    assert main(["calibrate", "-m", str(tiny_llama4), *extra]) == 1
    assert capsys.readouterr().err.startswith("river-cpp: error:")
