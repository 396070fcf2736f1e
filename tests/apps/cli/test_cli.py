"""The river-cpp command: generate with river options, build-river, errors."""

from __future__ import annotations

import pytest

from river_cpp.apps.cli import main

pytestmark = pytest.mark.usefixtures("river_cache")  # rivers of tiny models: a per-test cache


def test_generate_prints_text_stats_and_exits(tiny_llama4, capsys):
    assert main(["generate", "Hello", "--model", str(tiny_llama4), "-n", "5", "--exit-layer", "2"]) == 0
    out, err = capsys.readouterr()
    assert out.endswith("\n")
    assert "tokens/s" in err
    # the first token comes from the prompt, which runs the full backbone (4 layers)
    # even when it is one token long; the other four left at layer 2
    assert "exit: mean layer 2.40/4" in err


def test_generate_backbone_only(tiny_llama4, capsys):
    assert main(["generate", "Hello", "--model", str(tiny_llama4), "-n", "3", "--river", "none"]) == 0
    assert "exit:" not in capsys.readouterr().err


def test_generate_with_a_q8_0_cache_type(tiny_llama_h32, tiny_llama4, capsys):
    """--cache-type-k / -ctv reach the model's options: a q8_0 K runs where q8_0 blocks
    tile the heads; either is refused, by its name, where they do not."""
    argv = ["generate", "Hello", "-n", "3", "--river", "none"]
    assert main([*argv, "--model", str(tiny_llama_h32), "--cache-type-k", "q8_0"]) == 0
    capsys.readouterr()
    for option, name in (("--cache-type-k", "type_k"), ("-ctv", "type_v")):
        assert main([*argv, "--model", str(tiny_llama4), option, "q8_0"]) == 1
        assert f"error: {name}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*argv, "--model", str(tiny_llama_h32), "--cache-type-k", "q4_k"])


def test_build_river_to_a_path(tiny_llama4, tmp_path, capsys):
    out = tmp_path / "river.gguf"
    assert main(["build-river", str(tiny_llama4), "--type", "q8_0", "-o", str(out)]) == 0
    assert out.is_file()
    assert main(["generate", "Hi", "--model", str(tiny_llama4), "-n", "2", "--river", str(out), "--tau", "0.5"]) == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["generate", "Hi", "--model", "missing.gguf"],
        ["generate", "Hi", "--model", "{tiny}", "--max-tokens", "0"],
        ["generate", "Hi", "--model", "{tiny}", "--river", "iq2_xxs"],
        ["generate", "Hi", "--model", "{tiny}", "--exit-layer", "9"],
    ],
)
def test_errors_are_one_line(argv, tiny_llama4, capsys):
    argv = [a.format(tiny=tiny_llama4) for a in argv]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("river-cpp: error:") and "Traceback" not in err


def test_generate_chat_uses_the_template(tiny_llama4, capsys):
    assert main(["generate", "Hi", "--chat", "--model", str(tiny_llama4), "-n", "3", "--river", "none"]) == 0
    assert "prompt: 10 tokens" in capsys.readouterr().err  # <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n


# ---------------------------------------------------------------- eval

EVAL_SMALL = [
    "--tau",
    "0.75",
    "--variants",
    "none",
    "--tokens",
    "8",
    "--prefix",
    "4",
    "--forced",
    "4",
    "--prompts",
    "1",
    "--generate",
    "3",
    "--threads",
    "1",
]


def test_eval_prints_statistics_and_a_table_and_writes_json(tiny_llama4, tmp_path, capsys):
    from river_cpp.measure.comparison import Comparison

    out = tmp_path / "eval.json"
    assert main(["eval", "--model", str(tiny_llama4), *EVAL_SMALL, "--ladder", "F16", "--json", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "====== KL divergence statistics: river tau=0.75 (8 positions) ======" in stdout
    assert "| llama.cpp F16 |" in stdout and "the signal" in stdout  # table and verdict
    result = Comparison.load(out)
    assert [r.name for r in result.rows][-2:] == ["full river q4_0", "llama.cpp F16"]
    assert result.n_chunks == 2 and result.forced == 4 and "chat" in result.corpus


def test_eval_says_when_llama_cpp_ran_without_extra_buffer_types(tiny_llama4, monkeypatch, capsys):
    from river_cpp.engine import _core
    from river_cpp.engine.probes.extra_bufts import ENV

    if not _core.cpu_extra_buffer_types():
        pytest.skip("this ggml's CPU backend has no extra buffer type to turn off")
    monkeypatch.setenv(ENV, "none")
    assert main(["eval", "--model", str(tiny_llama4), *EVAL_SMALL, "--ladder", "F16"]) == 0
    stdout = capsys.readouterr().out
    assert "note: llama.cpp ran without extra buffer types (no repacked layouts): " in stdout
    assert f"({ENV}=none)" in stdout


def test_eval_reads_corpus_files_and_plots_with_bench_speeds(tiny_llama4, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (pip install river-cpp[plot])")
    from river_cpp.measure.bench import REFERENCE, BenchReport, BenchRow

    text = tmp_path / "notes.txt"
    text.write_text("The river runs past the mill and under the old stone bridge. " * 20, encoding="utf-8")
    bench = tmp_path / "bench.json"
    BenchReport(
        "m.gguf",
        0,
        128,
        1,
        2,
        512,
        [
            BenchRow(name, "river-cpp", "tg128", 128, 1, (tok_s,))
            for name, tok_s in ((REFERENCE, 100.0), ("full river q4_0", 150.0))
        ],
    ).save(bench)
    png = tmp_path / "pareto.png"
    assert (
        main(
            [
                "eval",
                "--model",
                str(tiny_llama4),
                *EVAL_SMALL,
                "--ladder",
                "none",
                "--corpus",
                str(text),
                "--plot",
                str(png),
                "--bench",
                str(bench),
            ]
        )
        == 0
    )
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "llama.cpp" not in capsys.readouterr().out


@pytest.mark.slow
def test_eval_can_measure_the_speeds_it_plots(tiny_llama4, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (pip install river-cpp[plot])")
    png = tmp_path / "pareto.png"
    assert (
        main(
            ["eval", "--model", str(tiny_llama4), *EVAL_SMALL, "--ladder", "F16", "--plot", str(png), "--measure-speed"]
        )
        == 0
    )
    bench_table = capsys.readouterr().out.split("| configuration |")[0]  # printed before eval's own table
    assert "| river tau=0.75 |" in bench_table and "tg128" in bench_table and "| llama.cpp F16 |" in bench_table
    assert png.is_file()


def test_eval_from_json_reprints_saved_results(tiny_llama4, tmp_path, capsys):
    saved = tmp_path / "eval.json"
    assert main(["eval", "--model", str(tiny_llama4), *EVAL_SMALL, "--ladder", "none", "--json", str(saved)]) == 0
    first = capsys.readouterr().out
    assert main(["eval", "--from-json", str(saved)]) == 0
    again = capsys.readouterr().out
    assert again.strip() and again.strip() in first


@pytest.mark.parametrize(
    "options, message",
    [
        (["--tokens", "0"], "--tokens"),
        (["--variants", "tail"], "unknown variants"),
        (["--bench", "missing.json"], "missing.json"),
        (["--json", "/no/such/folder/x.json"], "no folder"),
    ],
)
def test_eval_errors_are_one_line(tiny_llama4, options, message, capsys):
    assert main(["eval", "--model", str(tiny_llama4), "--ladder", "none", *options]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("river-cpp: error:") and message in err


def test_generate_speculative_options(tiny_llama4, capsys):
    argv = ["generate", "Hello", "--model", str(tiny_llama4), "-n", "6", "--speculative", "--draft-max", "3"]
    assert main([*argv, "--draft-vocab", "50", "--draft-p-min", "0.2"]) == 0
    assert "speculative:" in capsys.readouterr().err


@pytest.mark.parametrize("given, expected", [([], None), (["--draft-vocab", "0"], None), (["--draft-vocab", "50"], 50)])
def test_draft_vocab_option(given, expected):
    import argparse

    from river_cpp.apps.cli._common import add_speculative_arguments, measured_draft

    parser = argparse.ArgumentParser()
    add_speculative_arguments(parser)
    spec = measured_draft(parser.parse_args(["--speculative", *given]), n_layer=4)
    assert spec.draft_vocab == expected


def test_draft_memory_and_corpus_options(tmp_path):
    import argparse

    from river_cpp.apps.cli._common import add_speculative_arguments, draft_settings
    from river_cpp.decoding.draft_memory import DEFAULT_MEMORY_TOKENS

    parser = argparse.ArgumentParser()
    add_speculative_arguments(parser)
    spec = draft_settings(parser.parse_args(["--speculative"]))
    assert spec.memory and spec.memory_tokens == DEFAULT_MEMORY_TOKENS and spec.corpus == ()
    spec = draft_settings(parser.parse_args(["--speculative", "--draft-memory", "0", "--draft-corpus", "a", "b/c"]))
    assert not spec.memory and spec.corpus == ("a", "b/c")
    assert draft_settings(parser.parse_args(["--speculative", "--draft-memory", "1000"])).memory_tokens == 1000


def test_generate_with_a_draft_corpus(tiny_llama4, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "notes.txt").write_text("Hello world, hello world.\n")
    argv = ["generate", "Hello", "--model", str(tiny_llama4), "-n", "6", "--speculative", "-v"]
    assert main([*argv, "--draft-corpus", str(tmp_path / "notes.txt")]) == 0
    assert "corpus" in capsys.readouterr().err
    assert main([*argv, "--draft-corpus", str(tmp_path / "missing")]) == 1
    assert "corpus path not found" in capsys.readouterr().err
