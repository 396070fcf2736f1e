"""The river-cpp command: generate with river options, build-river, errors."""

from __future__ import annotations

import pytest

from river_cpp.cli import main


pytestmark = pytest.mark.usefixtures("river_cache")  # rivers of tiny models: a per-test cache


def test_generate_prints_text_stats_and_exits(tiny_llama4, capsys):
    assert main(["generate", "Hello", "--model", str(tiny_llama4), "-n", "5", "--exit-layer", "2"]) == 0
    out, err = capsys.readouterr()
    assert out.endswith("\n")
    assert "tokens/s" in err
    assert "exit: mean layer 2.00/4" in err


def test_generate_backbone_only(tiny_llama4, capsys):
    assert main(["generate", "Hello", "--model", str(tiny_llama4), "-n", "3", "--river", "none"]) == 0
    assert "exit:" not in capsys.readouterr().err


def test_build_river_to_a_path(tiny_llama4, tmp_path, capsys):
    out = tmp_path / "river.gguf"
    assert main(["build-river", str(tiny_llama4), "--type", "q8_0", "-o", str(out)]) == 0
    assert out.is_file()
    assert main(["generate", "Hi", "--model", str(tiny_llama4), "-n", "2", "--river", str(out), "--tau", "0.5"]) == 0


@pytest.mark.parametrize("argv", [
    ["generate", "Hi", "--model", "missing.gguf"],
    ["generate", "Hi", "--model", "{tiny}", "--max-tokens", "0"],
    ["generate", "Hi", "--model", "{tiny}", "--river", "iq2_xxs"],
    ["generate", "Hi", "--model", "{tiny}", "--exit-layer", "9"],
])
def test_errors_are_one_line(argv, tiny_llama4, capsys):
    argv = [a.format(tiny=tiny_llama4) for a in argv]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("river-cpp: error:") and "Traceback" not in err


def test_generate_chat_uses_the_template(tiny_llama4, capsys):
    assert main(["generate", "Hi", "--chat", "--model", str(tiny_llama4), "-n", "3", "--river", "none"]) == 0
    assert "prompt: 10 tokens" in capsys.readouterr().err  # <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n
