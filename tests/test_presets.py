"""Presets: the library's defaults are the `default` preset; `--preset paper` routes as the paper."""

import pytest

from river_cpp import ExitPolicy, RiverModel
from river_cpp.cli import main
from river_cpp.presets import DEFAULT, PAPER, preset


def test_the_defaults_are_the_default_preset(tiny_llama4, river_cache):
    with RiverModel(tiny_llama4, n_ctx=32) as model:
        assert model.prefill == DEFAULT.prefill
        assert model.policy == DEFAULT.policy == ExitPolicy.at_layer(0)
        assert DEFAULT.river in model.river_path.name


def test_paper_preset_options_load(tiny_llama4, river_cache):
    with RiverModel(tiny_llama4, n_ctx=32, **PAPER.model_options()) as model:
        assert model.prefill == "exit"
        assert model.policy == ExitPolicy.uniform(PAPER.tau, min_layer=PAPER.min_layer)
        assert PAPER.river in model.river_path.name


def test_generate_preset_paper(tiny_llama4, river_cache, capsys):
    assert main(["generate", "Hello", "--model", str(tiny_llama4), "-n", "3", "--preset", "paper"]) == 0
    assert any(PAPER.river in p.name for p in (river_cache / "rivers").iterdir())


def test_unknown_preset():
    with pytest.raises(ValueError, match="known: default, paper, lossless"):
        preset("fast")


def test_generate_preset_lossless_is_speculative(tiny_llama4, river_cache, capsys):
    assert main(["generate", "Hello", "--model", str(tiny_llama4), "-n", "6", "--preset", "lossless"]) == 0
    assert "speculative:" in capsys.readouterr().err
