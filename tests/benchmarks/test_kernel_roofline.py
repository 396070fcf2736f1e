"""benchmarks/kernel_roofline.py and its bindings: the quick mode measures every kernel set
here and every covered type, its table has one row each, and its figures are positive
and under the measured peak (no timing is asserted beyond that sanity bound)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from river_cpp.engine import _core
from river_cpp.engine.probes.own_products import COVERED

from river_bench import kernel_roofline as roofline

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kernel_roofline.py"
KERNELS = _core.own_kernels()
# A product cannot beat its instruction's peak; the bound leaves room for a peak that a
# busy machine measured low.
SANITY = 3.0


def _main():
    spec = importlib.util.spec_from_file_location("benchmark_kernel_roofline", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_the_quick_mode_measures_every_kernel_set_and_type(tmp_path, capsys):
    out = tmp_path / "roofline.json"
    assert _main()(["--quick", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    table = [line for line in printed.splitlines() if line.startswith("|")]
    shapes = roofline.QUICK_SHAPES
    assert len(table) == 2 + len(KERNELS) * len(COVERED) * len(shapes)
    assert all(line.count("|") == 4 + len(roofline.COLUMNS) for line in table)
    assert [line.split("|")[1].strip() for line in table[2:]] == [k for k in KERNELS for _ in COVERED for _ in shapes]

    result = json.loads(out.read_text())
    peaks = result["peaks"]
    assert list(peaks) == KERNELS
    assert peaks["reference"] == []
    assert all(p["gmac_per_s"] > 0 for found in peaks.values() for p in found)
    fastest = max((p["gmac_per_s"] for found in peaks.values() for p in found), default=None)
    for row in result["rows"]:
        assert list(row["gmac_per_s"]) == [str(n) for n in roofline.COLUMNS], row
        own_peak = peaks[row["kernels"]][0]["gmac_per_s"] if peaks[row["kernels"]] else None
        for n, rate in row["gmac_per_s"].items():
            assert rate > 0
            if own_peak:
                assert rate < SANITY * own_peak, (row["kernels"], row["type"], n)
                assert row["fraction_of_peak"][n] == pytest.approx(rate / own_peak)
            elif fastest:  # the scalar reference: under any instruction's peak here
                assert rate < SANITY * fastest
        if not own_peak:
            assert row["fraction_of_peak"] is None


def test_a_bad_shape_is_refused_before_measuring(capsys):
    with pytest.raises(SystemExit):
        _main()(["--quick", "--shapes", "64x100"])
    assert "multiple of 256" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _main()(["--quick", "--shapes", "64by512"])


def test_the_bindings_refuse_bad_arguments():
    with pytest.raises(_core.RiverError, match="no own kernels 'sse9'"):
        _core.own_instruction_peaks("sse9")
    with pytest.raises(_core.RiverError, match="seconds"):
        _core.own_instruction_peaks("reference", -1.0)
    with pytest.raises(_core.RiverError, match="no product for tq2_0"):
        _core.own_product_seconds("reference", "tq2_0", 8, 256, [1], 0.0)
    with pytest.raises(_core.RiverError, match="multiple of 256"):
        _core.own_product_seconds("reference", "q4_K", 8, 100, [1], 0.0)
    with pytest.raises(_core.RiverError, match="column counts"):
        _core.own_product_seconds("reference", "q4_0", 8, 64, [0], 0.0)
    with pytest.raises(_core.RiverError, match="positive"):
        _core.own_product_seconds("reference", "q4_0", 0, 64, [1], 0.0)


def test_a_product_is_timed_for_each_column_count():
    times = _core.own_product_seconds("reference", "q4_0", 21, 64, [1, 3], 0.0)
    assert len(times) == 2 and all(t > 0 for t in times)
