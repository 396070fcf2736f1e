"""Presets: the library's defaults are the lossless preset (exact output, drafted);
`--preset fast` and `--preset paper` are the lossy decodes, named."""

import pytest

from river_cpp import ExitPolicy, RiverModel, Speculative
from river_cpp.apps.cli import main
from river_cpp.decoding.presets import DEFAULT, FAST, LOSSLESS, PAPER, preset


def test_the_defaults_are_the_lossless_preset(tiny_llama4, river_cache):
    assert DEFAULT is LOSSLESS
    with RiverModel(tiny_llama4, n_ctx=32) as model:
        assert model.prefill == DEFAULT.prefill
        assert model.policy == DEFAULT.policy == ExitPolicy.never()
        assert model.speculative == Speculative(draft="river+ngram")
        assert DEFAULT.river == "auto"  # the river that pays on the file (tests/engine/decisions/test_river_choice.py)
        assert model.river_choice.river in model.river_path.name


def test_without_a_river_the_default_drafts_ngrams(tiny_llama4, river_cache):
    with RiverModel(tiny_llama4, n_ctx=32, river=None) as model:
        assert model.speculative == Speculative(draft="ngram")


def test_a_lossy_policy_turns_the_default_draft_off(tiny_llama4, river_cache):
    with RiverModel(tiny_llama4, n_ctx=32, **FAST.model_options()) as model:
        assert model.policy == ExitPolicy.at_layer(0)
        assert model.speculative is None
        assert FAST.river in model.river_path.name


def test_paper_preset_options_load(tiny_llama4, river_cache):
    with RiverModel(tiny_llama4, n_ctx=32, **PAPER.model_options()) as model:
        assert model.prefill == "exit"
        assert model.policy == ExitPolicy.uniform(PAPER.tau, min_layer=PAPER.min_layer)
        assert model.speculative is None
        assert PAPER.river in model.river_path.name


def test_generate_preset_paper(tiny_llama4, river_cache, capsys):
    assert main(["generate", "Hello", "--model", str(tiny_llama4), "-n", "3", "--preset", "paper"]) == 0
    assert any(PAPER.river in p.name for p in (river_cache / "rivers").iterdir())
    assert "speculative:" not in capsys.readouterr().err


def test_unknown_preset():
    with pytest.raises(ValueError, match="known: lossless, fast, paper"):
        preset("default")


@pytest.mark.parametrize("options", [[], ["--preset", "lossless"]])
def test_generate_is_lossless_by_default(tiny_llama4, river_cache, capsys, options):
    assert main(["generate", "Hello", "--model", str(tiny_llama4), "-n", "6", *options]) == 0
    assert "speculative:" in capsys.readouterr().err
