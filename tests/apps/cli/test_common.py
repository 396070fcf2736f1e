"""river_cpp.apps.cli._common: -hf REPO[:QUANT] resolves through the Hugging Face cache,
offline against a cache the test writes (tests/hf_cache.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hf_cache import use_offline_cache, write_repo

from river_cpp.apps.cli import main
from river_cpp.apps.cli._common import model_path

pytest.importorskip("huggingface_hub")

REPO = "river-cpp-tests/cli-GGUF"


@pytest.fixture
def cached_repo(tmp_path, monkeypatch, tiny_llama) -> Path:
    """REPO in an offline cache, with one GGUF; the cached file's path."""
    snapshot = write_repo(tmp_path / "hf", REPO, {"tiny-F32.gguf": tiny_llama})
    use_offline_cache(monkeypatch, tmp_path / "hf")
    return snapshot / "tiny-F32.gguf"


def test_hf_resolves_to_the_cached_file(cached_repo):
    assert model_path(None, REPO) == str(cached_repo)  # the repository's one GGUF
    assert model_path(None, f"{REPO}:f32") == str(cached_repo)


def test_hf_and_model_together_are_refused():
    with pytest.raises(ValueError, match="not both"):
        model_path("model.gguf", REPO)


def test_serve_reports_an_hf_file_it_cannot_find_before_serving(cached_repo, capsys):
    assert main(["serve", "-hf", f"{REPO}:Q4_K_M", "--port", "1"]) == 1
    error = capsys.readouterr().err
    assert "no file" in error and "tiny-F32.gguf" in error  # it lists what there is


def test_generate_runs_the_hf_file(cached_repo, capsys):
    argv = ["generate", "The river", "-n", "4", "-t", "1", "--n-ctx", "64", "--river", "none"]
    assert main([*argv, "-hf", REPO]) == 0
    from_hub = capsys.readouterr().out
    assert main([*argv, "--model", str(cached_repo)]) == 0
    assert capsys.readouterr().out == from_hub  # greedy: the same text from the same file
