"""river-cpp bench: the measurement end to end on tiny models, its JSON and table, the command."""

from __future__ import annotations

import json

import gguf
import pytest

from river_cpp.apps.cli import main
from river_cpp.measure.bench import (
    REFERENCE,
    BenchReport,
    BenchRow,
    bench_tokens,
    default_configs,
    gguf_tensor_bytes,
    measure,
)
from river_cpp.measure.configs import backbone_config, river_at_tau

pytestmark = pytest.mark.usefixtures("river_cache")  # rivers and ladder rungs of tiny models: a per-test cache

TINY = dict(n_prompt=8, n_gen=4, repeats=2, n_threads=1, progress=False)


@pytest.mark.slow
def test_measure_end_to_end(tiny_llama4):
    configs = default_configs([0.5])  # backbone, river tau=0.5, full river q4_0
    report = measure(tiny_llama4, configs, ["F16", "Q8_0", "Q4_0"], **TINY)

    names = ["backbone", "river tau=0.5", "full river q4_0", "llama.cpp F16", "llama.cpp Q8_0", "llama.cpp Q4_0"]
    assert report.configs == names
    assert [(row.config, row.test) for row in report.rows] == [
        (name, test) for name in names for test in ("pp8", "tg4")
    ]
    assert report.n_layer == 4 and report.n_ctx == 16 + 4 + 1  # generate_step keeps room for one more token
    for row in report.rows:
        assert len(row.samples) == 2 and all(s > 0 for s in row.samples)
        assert row.peak_rss_bytes > report.rss_baseline_bytes > 0
        assert (row.mean_exit_layer is None) == (row.engine == "llama.cpp")
    exits = {(row.config, row.kind): row.mean_exit_layer for row in report.rows}
    assert exits[("backbone", "pp")] == exits[("backbone", "tg")] == 4.0
    assert exits[("full river q4_0", "pp")] == exits[("full river q4_0", "tg")] == 0.0
    assert 2.0 <= exits[("river tau=0.5", "tg")] <= 4.0  # min_layer 2

    size = {row.config: row.size_bytes for row in report.rows}
    assert size["backbone"] == size["llama.cpp F16"] == gguf_tensor_bytes(tiny_llama4)
    assert size["river tau=0.5"] == size["full river q4_0"] > size["backbone"]  # the river is loaded as well
    assert size["llama.cpp F16"] > size["llama.cpp Q8_0"] > size["llama.cpp Q4_0"]
    assert report.decode_tok_s("llama.cpp Q4_0") == report.row("llama.cpp Q4_0", "tg").t_s_mean
    assert report.ratio(REFERENCE, "pp") == 1.0


def test_json_round_trip_and_schema(tiny_llama4, tmp_path):
    report = measure(tiny_llama4, [backbone_config()], ["F16"], memory=False, **TINY)
    path = tmp_path / "bench.json"
    report.save(path)
    data = json.loads(path.read_text())
    assert data["format"] == "river-cpp-bench/1"
    assert data["n_prompt"] == 8 and data["n_gen"] == 4 and data["repetitions"] == 2 and data["n_threads"] == 1
    assert data["rss_baseline_bytes"] is None
    row = data["rows"][0]
    assert set(row) == {
        "config",
        "engine",
        "test",
        "n_tokens",
        "size_bytes",
        "samples",
        "t_s_mean",
        "t_s_sd",
        "mean_exit_layer",
        "peak_rss_bytes",
    }
    assert row["t_s_mean"] == pytest.approx(sum(row["samples"]) / 2)
    assert BenchReport.load(path) == report


def test_configurations_take_turns_in_every_repetition(tiny_llama4, monkeypatch):
    import river_cpp.measure.bench.runners as bench

    calls = []
    run = bench.Runner.run

    def recording_run(self, kind, work):
        calls.append((self.target.name, kind))
        return run(self, kind, work)

    monkeypatch.setattr(bench.Runner, "run", recording_run)
    measure(tiny_llama4, [backbone_config()], ["F16"], memory=False, **TINY)
    one_round = [("backbone", "pp"), ("backbone", "tg"), ("llama.cpp F16", "pp"), ("llama.cpp F16", "tg")]
    assert calls == one_round * 3  # warm-up, then r=2


def test_zero_tokens_skips_a_test(tiny_llama4):
    report = measure(tiny_llama4, [backbone_config()], [], memory=False, **dict(TINY, n_prompt=0))
    assert [row.test for row in report.rows] == ["tg4"]


@pytest.mark.parametrize(
    "options, error",
    [
        (dict(repeats=0), "repeats must be a positive integer"),
        (dict(n_prompt=-1), "n_prompt must be a non-negative integer"),
        (dict(n_prompt=0, n_gen=0), "nothing to measure"),
        (dict(n_threads=0), "n_threads must be a positive integer"),
        (dict(peers=["Q3_K"]), "unknown llama.cpp peer 'Q3_K'"),
        (dict(peers=[], configs=[]), "nothing to measure"),
        (dict(configs=[river_at_tau(0.5), river_at_tau(0.5)]), "repeated: 'river tau=0.5'"),
    ],
)
def test_bad_parameters(tiny_llama4, options, error):
    options = {**TINY, "configs": [backbone_config()], "peers": ["F16"], **options}
    with pytest.raises(ValueError, match=error):
        measure(tiny_llama4, options.pop("configs"), options.pop("peers"), **options)


@pytest.mark.slow
def test_gguf_tensor_bytes_agrees_with_gguf_py(tiny_llama4):
    reader = gguf.GGUFReader(tiny_llama4)
    assert gguf_tensor_bytes(tiny_llama4) == sum(int(t.n_bytes) for t in reader.tensors)


def test_bench_tokens_are_fixed_text(tiny_llama4):
    short, long = bench_tokens(tiny_llama4, 20), bench_tokens(tiny_llama4, 5000)
    assert len(short) == 20 and len(long) == 5000  # longer than the text: it repeats
    assert long[:20] == short == bench_tokens(tiny_llama4, 20)
    assert len(set(long)) > 100


# ---------------------------------------------------------------- table


def _row(config: str, test: str, samples, **extra) -> BenchRow:
    engine = "llama.cpp" if config.startswith("llama.cpp") else "river-cpp"
    return BenchRow(config, engine, test, int(test[2:]), 3 * 1024 * 1024, tuple(samples), **extra)


def _report(rows) -> BenchReport:
    return BenchReport(
        model="/m/model.gguf",
        n_prompt=512,
        n_gen=128,
        repetitions=2,
        n_threads=2,
        n_ctx=512,
        rows=rows,
        n_layer=30,
        load_average=0.5,
        cpu_count=2,
    )


def test_table_has_llama_bench_shape_and_ratios():
    report = _report(
        [
            _row("river tau=0.98", "pp512", [300, 300], mean_exit_layer=30.0, peak_rss_bytes=200 * 1024 * 1024),
            _row("river tau=0.98", "tg128", [90, 110], mean_exit_layer=15.5, peak_rss_bytes=200 * 1024 * 1024),
            _row("llama.cpp F16", "pp512", [200, 200], peak_rss_bytes=100 * 1024 * 1024),
            _row("llama.cpp F16", "tg128", [50, 50], peak_rss_bytes=100 * 1024 * 1024),
        ]
    )
    lines = report.table().splitlines()
    header = lines.index("| config | size | test | t/s (mean ± sd) | / llama.cpp F16 | exit layer | peak RSS |")
    assert lines[header + 1] == "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    body = lines[header + 2 : header + 6]
    assert body[0] == "| river tau=0.98 | 3.00 MiB | pp512 | 300.00 ± 0.00 | 1.50 | 30.0/30 | 200.00 MiB |"
    assert body[1] == "| river tau=0.98 | 3.00 MiB | tg128 | 100.00 ± 14.14 | 2.00 | 15.5/30 | 200.00 MiB |"
    assert body[3] == "| llama.cpp F16 | 3.00 MiB | tg128 | 50.00 ± 0.00 | 1.00 |  | 100.00 MiB |"
    assert lines[header + 6] == ""  # the table ends; the legend follows


def test_whole_requests_from_the_prefill_and_decode_means():
    report = _report(
        [
            _row("river tau=0.98", "pp512", [256, 256]),
            _row("river tau=0.98", "tg128", [127, 127]),
            _row("llama.cpp F16", "pp512", [128, 128]),
            _row("llama.cpp F16", "tg128", [127, 127]),
        ]
    )
    assert report.whole_request("river tau=0.98") == pytest.approx((2.0, 3.0))  # 512/256, then 127 steps
    assert report.whole_request("llama.cpp F16") == pytest.approx((4.0, 5.0))
    lines = report.table().splitlines()
    header = lines.index("| config | whole request pp512+tg128: ttft s | whole s | / llama.cpp F16 |")
    assert lines[header + 2] == "| river tau=0.98 | 2.00 | 3.00 | 1.67 |"
    assert _report([_row("backbone", "tg128", [10])]).whole_request("backbone") is None


def test_table_without_reference_or_memory_drops_those_columns():
    report = _report([_row("backbone", "tg128", [10, 12], mean_exit_layer=30.0)])
    assert "| config | size | test | t/s (mean ± sd) | exit layer |" in report.table().splitlines()
    with pytest.raises(KeyError, match="no pp result for 'backbone'"):
        report.prefill_tok_s("backbone")
    assert report.ratio("backbone", "tg") is None


# ---------------------------------------------------------------- command


def test_cli_bench_prints_the_table_and_writes_json(tiny_llama4, tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = [
        "bench",
        "-m",
        str(tiny_llama4),
        "-p",
        "8",
        "-n",
        "4",
        "-r",
        "2",
        "-t",
        "1",
        "--tau",
        "0.5",
        "--no-full-river",
        "--peers",
        "f16",
        "q4_0",
        "--no-memory",
        "--json",
        str(out),
    ]
    assert main(argv) == 0
    stdout = capsys.readouterr().out
    assert "| config | size | test | t/s (mean ± sd) | / llama.cpp F16 | exit layer |" in stdout
    for name in ("backbone", "river tau=0.5", "llama.cpp F16", "llama.cpp Q4_0"):
        assert f"| {name} | " in stdout
    report = BenchReport.load(out)
    assert report.configs == ["backbone", "river tau=0.5", "llama.cpp F16", "llama.cpp Q4_0"]


def test_cli_bench_measures_evals_variants(tiny_llama4, tmp_path):
    from river_cpp.measure import comparison as cmp

    out = tmp_path / "bench.json"
    argv = [
        "bench",
        "-m",
        str(tiny_llama4),
        "-p",
        "0",
        "-n",
        "2",
        "-r",
        "1",
        "-t",
        "1",
        "--tau",
        "0.5",
        "--variants",
        "head",
        "--peers",
        "none",
        "--no-memory",
        "--json",
        str(out),
    ]
    assert main(argv) == 0
    planned = [e.config.name for e in cmp.plan(4, taus=[0.5], variants=["head"])]
    assert set(planned) <= set(BenchReport.load(out).configs)


def test_cli_bench_backbone_only_without_peers(tiny_llama4, capsys):
    argv = [
        "bench",
        "-m",
        str(tiny_llama4),
        "-p",
        "4",
        "-n",
        "2",
        "-r",
        "1",
        "-t",
        "1",
        "--river",
        "none",
        "--peers",
        "none",
        "--no-memory",
    ]
    assert main(argv) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| backbone |")]
    assert len(rows) == 3  # pp4, tg2, and its whole request
    assert rows[0].split(" | ")[2] == "pp4" and rows[1].split(" | ")[2] == "tg2" and len(rows[2].split(" | ")) == 3


@pytest.mark.parametrize(
    "argv",
    [
        ["-r", "0"],
        ["-p", "-1"],
        ["-t", "0"],
        ["--peers", "Q3_K"],
        ["--tau", "0.5", "--min-layer", "-1"],
        ["--json", "{tmp}/missing/out.json"],
        ["-m", "missing.gguf"],
    ],
)
def test_cli_bench_errors_are_one_line(argv, tiny_llama4, tmp_path, capsys):
    argv = ["bench", "-m", str(tiny_llama4), "--no-memory"] + [a.format(tmp=tmp_path) for a in argv]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("river-cpp: error:") and "Traceback" not in err


@pytest.mark.parametrize("mode", ["none", "all"])
def test_cli_bench_says_when_llama_cpp_ran_without_extra_buffer_types(tiny_llama4, monkeypatch, capsys, mode):
    from river_cpp.engine import _core
    from river_cpp.engine.probes.extra_bufts import ENV

    if not _core.cpu_extra_buffer_types():
        pytest.skip("this ggml's CPU backend has no extra buffer type to turn off")
    monkeypatch.setenv(ENV, mode)
    argv = ["bench", "-m", str(tiny_llama4), "-p", "4", "-n", "2", "-r", "1", "-t", "1", "--river", "none"]
    assert main(argv + ["--peers", "f16", "--no-memory"]) == 0
    stdout = capsys.readouterr().out
    note = "note: llama.cpp ran without extra buffer types (no repacked layouts): "
    assert (note in stdout) == (mode == "none")
    if mode == "none":
        assert f"({ENV}=none)" in stdout
