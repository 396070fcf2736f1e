"""river_cpp.engine.files.hub and RiverModel.from_pretrained, offline against a cache folder the
tests write (tests/hf_cache.py): no network is ever used."""

from __future__ import annotations

from pathlib import Path

import pytest
from hf_cache import use_offline_cache, write_repo

from river_cpp.engine.files.hub import choose_file, download, download_spec, parse_repo_spec, quant_pattern, repo_files

pytest.importorskip("huggingface_hub")

REPO = "river-cpp-tests/tiny-GGUF"
FILES = ("tiny-F16.gguf", "tiny-Q8_0.gguf", "mmproj-tiny-Q8_0.gguf", "README.md")


@pytest.fixture
def hf_cache(tmp_path, monkeypatch, tiny_llama4: Path, make_tiny_gguf) -> Path:
    """A cache holding REPO with an F16 and a Q8_0 tiny model, a projector and a README."""
    q8 = make_tiny_gguf("tiny_llama4_q8", n_layer=4, dtype="q8_0", seed=1, tie_embeddings=False)
    cache = tmp_path / "hf"
    sources = dict(zip(FILES, (tiny_llama4, q8, q8, tiny_llama4)))
    write_repo(cache, REPO, sources)
    use_offline_cache(monkeypatch, cache)
    return cache


# ---------------------------------------------------------------- names, without a cache


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("owner/name", ("owner/name", None)),
        ("owner/name:Q8_0", ("owner/name", "Q8_0")),
        ("owner/name-GGUF:q4_k_m", ("owner/name-GGUF", "q4_k_m")),
    ],
)
def test_parse_repo_spec(spec, expected):
    assert parse_repo_spec(spec) == expected


@pytest.mark.parametrize("spec", ["name", "owner/name/extra", "/name", "owner/", "owner/name:", ""])
def test_parse_repo_spec_refuses_what_is_not_a_repository(spec):
    with pytest.raises(ValueError, match="OWNER/NAME|nothing after"):
        parse_repo_spec(spec)


def test_quant_pattern_refuses_globs():
    with pytest.raises(ValueError, match="quantization"):
        quant_pattern("Q*")


def test_choose_file_by_quant_is_case_insensitive_and_passes_over_projectors():
    assert choose_file(FILES, quant_pattern("q8_0"), REPO) == "tiny-Q8_0.gguf"
    assert choose_file(FILES, quant_pattern("F16"), REPO) == "tiny-F16.gguf"
    assert choose_file(FILES, "mmproj*", REPO) == "mmproj-tiny-Q8_0.gguf"  # when asked for by name
    assert choose_file(["sub/model-Q4_K_M.gguf"], quant_pattern("Q4_K_M"), REPO) == "sub/model-Q4_K_M.gguf"


def test_choose_file_lists_the_candidates_when_it_cannot_choose():
    with pytest.raises(ValueError, match="2 files .* match") as caught:
        choose_file(FILES, quant_pattern(None), REPO)
    assert "tiny-F16.gguf" in str(caught.value) and "tiny-Q8_0.gguf" in str(caught.value)
    with pytest.raises(ValueError, match="no file .* matches") as caught:
        choose_file(FILES, quant_pattern("Q4_K_M"), REPO)
    assert "tiny-F16.gguf" in str(caught.value) and "README.md" not in str(caught.value)


# ---------------------------------------------------------------- the cache, offline


def test_download_reads_the_cache_offline(hf_cache):
    snapshot = next((hf_cache / f"models--{REPO.replace('/', '--')}" / "snapshots").iterdir())
    assert download(REPO, "tiny-F16.gguf") == snapshot / "tiny-F16.gguf"
    assert download(REPO, "*Q8_0.GGUF") == snapshot / "tiny-Q8_0.gguf"
    assert download_spec(f"{REPO}:q8_0") == snapshot / "tiny-Q8_0.gguf"


def test_what_is_not_cached_is_a_clear_error_offline(hf_cache):
    with pytest.raises(FileNotFoundError, match="HF_HUB_OFFLINE"):
        download(REPO, "tiny-Q4_0.gguf")
    with pytest.raises(FileNotFoundError, match="HF_HUB_OFFLINE"):
        download("river-cpp-tests/absent", "*.gguf")
    with pytest.raises(ValueError, match="no file"):
        download_spec(f"{REPO}:Q4_K_M")


def test_from_pretrained_loads_the_cached_file(hf_cache, river_cache, tiny_llama4):
    from river_cpp import RiverModel

    with RiverModel.from_pretrained(REPO, "*q8_0.gguf", n_ctx=64, n_threads=1, river=None, progress=False) as hub:
        with RiverModel(tiny_llama4, n_ctx=64, n_threads=1, river=None, progress=False) as local:
            assert hub.n_layer == local.n_layer == 4 and hub.n_ctx == 64
            # The Q8_0 file, not the F16 one: its logits differ by the quantization.
            ids = hub.tokenize("The river")
            hub_logits, local_logits = hub.forward(ids, last_only=True), local.forward(ids, last_only=True)
            assert hub_logits.shape == local_logits.shape and (hub_logits != local_logits).any()


def test_listing_falls_back_on_the_cache_when_the_hub_cannot_be_reached(hf_cache, monkeypatch):
    from huggingface_hub import HfApi, constants

    def unreachable(*args, **kwargs):
        raise ConnectionError("connection refused")

    # Online, but listing fails as it does without a network (huggingface_hub retries
    # for about 20 s before that, so the failure is made here instead).
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(HfApi, "list_repo_files", unreachable)
    assert repo_files(REPO) == sorted(FILES)
    with pytest.raises(ConnectionError, match="cannot reach .* the cache has none"):
        repo_files("river-cpp-tests/absent")
