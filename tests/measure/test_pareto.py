"""The Pareto plot: which points each panel shows, joined lines, the PNG file."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from river_cpp.measure.bench import REFERENCE, BenchReport, BenchRow
from river_cpp.measure.comparison import FULL_RIVER, LLAMA, RANDOM, STATIC, Comparison, Row, sweep_group
from river_cpp.measure.evaluate import QualityReport

pytest.importorskip("matplotlib", reason="the plot needs matplotlib (pip install river-cpp[plot])")

from river_cpp.measure.pareto import measured_configs, merged, pareto_figure, plot_pareto, speed_ratios  # noqa: E402

MIB = 1024 * 1024


def _row(name: str, group: str, kl: float, mib: float, **options) -> Row:
    rng = np.random.default_rng(0)
    reference = rng.normal(0, 1, (4, 8))
    quality = QualityReport.compare(reference, reference + kl * rng.normal(0, 1, reference.shape))
    return Row(name, group, quality, mib * MIB, **options)


@pytest.fixture
def comparison() -> Comparison:
    rows = [
        _row("river tau=0.97", sweep_group("cosine"), 1.0, 150, mean_exit_layer=6.0),
        _row("river tau=0.97: static k=6", STATIC, 1.2, 151, mean_exit_layer=6.0, control_of="river tau=0.97"),
        _row("river tau=0.97: random depths", RANDOM, 1.1, 150, mean_exit_layer=6.0, control_of="river tau=0.97"),
        _row("river tau=0.99", sweep_group("cosine"), 0.3, 250, mean_exit_layer=28.0),
        _row("full river q4_0", FULL_RIVER, 2.0, 110, mean_exit_layer=0.0),
        _row("llama.cpp F16", LLAMA, 0.0, 256),
        _row("llama.cpp Q8_0", LLAMA, 0.2, 140),
        _row("llama.cpp Q4_0", LLAMA, 1.5, 90),
    ]
    return Comparison("model.gguf", 30, 32, 64, 2, 1, 8, 256 * MIB, rows)


def _lines(axes) -> dict[str, list[float]]:
    """x data of each plotted series, by legend label."""
    return {line.get_label(): [float(x) for x in line.get_xdata()] for line in axes.get_lines()}


def test_bytes_panel_shows_every_row_with_a_positive_kld(comparison):
    _, bytes_axes = pareto_figure(comparison).axes
    lines = _lines(bytes_axes)
    assert lines[sweep_group("cosine")] == [150, 250]
    assert lines[LLAMA] == [140, 90]  # F16 has KLD 0: no place on a log axis
    assert lines[STATIC] == [151] and lines[RANDOM] == [150] and lines[FULL_RIVER] == [110]
    styles = {line.get_label(): line.get_linestyle() for line in bytes_axes.get_lines()}
    assert styles[sweep_group("cosine")] == styles[LLAMA] == "-" and styles[FULL_RIVER] == "None"
    assert bytes_axes.get_yscale() == "log"


def test_speed_panel_shows_only_rows_with_a_speed(comparison):
    speed_axes, _ = pareto_figure(
        comparison, speeds={"river tau=0.97": 1.5, "llama.cpp Q4_0": 1.9, "llama.cpp F16": 1.0}
    ).axes
    assert _lines(speed_axes) == {sweep_group("cosine"): [1.5], LLAMA: [1.9]}
    assert sorted(t.get_text() for t in speed_axes.texts) == ["0.97", "Q4_0"]  # point labels, no note
    speed_axes, _ = pareto_figure(comparison).axes
    assert _lines(speed_axes) == {} and ["--bench" in t.get_text() for t in speed_axes.texts] == [True]


def test_a_sweep_keeps_its_colour_in_both_panels(comparison):
    comparison.rows.append(_row("river tau=0.8 update_norm", sweep_group("update_norm"), 0.5, 200))
    speed_axes, bytes_axes = pareto_figure(comparison, speeds={"river tau=0.8 update_norm": 1.2}).axes

    def colours(axes) -> dict[str, str]:
        return {line.get_label(): line.get_color() for line in axes.get_lines()}

    assert colours(speed_axes)[sweep_group("update_norm")] == colours(bytes_axes)[sweep_group("update_norm")]
    assert colours(bytes_axes)[sweep_group("update_norm")] != colours(bytes_axes)[sweep_group("cosine")]


def test_plot_writes_a_png(comparison, tmp_path):
    path = plot_pareto(comparison, tmp_path / "pareto.png", speeds={"river tau=0.97": 1.5})
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_speed_ratios_from_a_bench_report():
    def tg(config: str, tok_s: float) -> BenchRow:
        return BenchRow(config, "river-cpp", "tg128", 128, 1, (tok_s, tok_s))

    report = BenchReport("m.gguf", 0, 128, 2, 2, 512, [tg(REFERENCE, 100.0), tg("river tau=0.97", 150.0)])
    assert speed_ratios(report) == {REFERENCE: 1.0, "river tau=0.97": 1.5}
    assert speed_ratios(report, reference="river tau=0.97")[REFERENCE] == pytest.approx(2 / 3)


def test_merged_keeps_each_rows_first_occurrence(comparison, tmp_path):
    comparison.save(tmp_path / "a.json")
    rows = [_row("llama.cpp F16", LLAMA, 9.0, 1), _row("new", LLAMA, 1, 1)]
    replace(comparison, rows=rows).save(tmp_path / "b.json")
    rows = merged([tmp_path / "a.json", tmp_path / "b.json"]).rows
    assert [r.name for r in rows] == [r.name for r in comparison.rows] + ["new"]
    assert next(r for r in rows if r.name == "llama.cpp F16").quality.median_kl == 0.0  # the first file's


def test_merged_refuses_runs_of_another_workload(comparison, tmp_path):
    comparison.save(tmp_path / "a.json")
    replace(comparison, prefix=64).save(tmp_path / "b.json")
    with pytest.raises(ValueError, match="differ in model or workload"):
        merged([tmp_path / "a.json", tmp_path / "b.json"])


def test_measured_configs_rebuild_the_measured_rows_and_the_backbone(comparison):
    comparison.rows.append(_row("river tau=0.8 update_norm", sweep_group("update_norm"), 0.5, 200))
    configs = measured_configs(comparison, taus=[0.97, 0.99], signal_taus=[0.8], q8_taus=[0.99])
    names = [c.name for c in configs]
    # the Q4_0 river's sweep (both signals) and full river, once each; llama.cpp rows are peers, not configs
    assert sorted(names) == [
        "backbone",
        "full river q4_0",
        "river tau=0.8 update_norm",
        "river tau=0.97",
        "river tau=0.99",
    ]
