"""The choice of backbone (river_cpp.engine.decisions.backbone_choice) asks llama.cpp, not a list of
names: an architecture llama.cpp runs but gguf-py's list lacks loads on llama.cpp's
context, and a name neither backbone knows gets one error that says so for both."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest
from foreign_archs import UNLISTED, write_foreign_gguf
from llama_run import llama_cpp_greedy

from river_cpp import RiverError, RiverModel
from river_cpp.engine import _core
from river_cpp.engine.compute.llama_backbone import ATTENTION, probe_llama_cpp
from river_cpp.engine.decisions.backbone_choice import GRAPH, LLAMA_CPP, choose_backbone

UNKNOWN = "nonesuch"  # in llama's layout, under a name no llama.cpp knows


@pytest.fixture(scope="module")
def unlisted_gguf(tmp_path_factory, tokenizer_fields) -> Path:
    assert UNLISTED not in gguf.MODEL_ARCH_NAMES.values(), (
        f"gguf-py now names '{UNLISTED}': pick another architecture llama.cpp runs that its list lacks"
    )
    folder = tmp_path_factory.mktemp("unlisted")
    return write_foreign_gguf(folder / f"tiny_{UNLISTED}.gguf", UNLISTED, tokenizer_fields, seed=3)


@pytest.fixture(scope="module")
def unknown_gguf(tmp_path_factory, tokenizer_fields) -> Path:
    folder = tmp_path_factory.mktemp("unknown")
    return write_foreign_gguf(folder / f"tiny_{UNKNOWN}.gguf", UNKNOWN, tokenizer_fields, seed=3)


def test_unlisted_architecture_runs_on_llama_cpp(unlisted_gguf):
    """Default options; the same greedy tokens as llama.cpp's own loop, plain and drafted."""
    choice = choose_backbone(unlisted_gguf)
    assert (choice.kind, choice.arch) == (LLAMA_CPP, UNLISTED)
    assert probe_llama_cpp(unlisted_gguf) == ATTENTION
    with RiverModel(unlisted_gguf, n_threads=2) as model:
        assert model.backbone_choice.kind == LLAMA_CPP
        ids = model.tokenize("The history of the river")
        plain = model.generate(ids, max_tokens=24, temperature=0, speculative=False)
        drafted = model.generate(ids, max_tokens=24, temperature=0)
    assert len(set(plain.token_ids)) > 1
    assert plain.token_ids == drafted.token_ids == llama_cpp_greedy(unlisted_gguf, ids, len(plain.token_ids))


def test_unknown_architecture_is_one_error_naming_both(unknown_gguf):
    assert choose_backbone(unknown_gguf).kind == LLAMA_CPP  # the graph does not build it: llama.cpp is asked
    graph = ", ".join(_core.graph_architectures())
    for attempt in (lambda: RiverModel(unknown_gguf, n_threads=2), lambda: probe_llama_cpp(unknown_gguf)):
        with pytest.raises(RiverError) as raised:
            attempt()
        message = str(raised.value)
        assert f"'{UNKNOWN}'" in message and graph in message
        assert "llama.cpp" in message and "did not recognise" in message


def test_a_file_llama_cpp_knows_but_cannot_load_is_not_called_unknown(tmp_path, tokenizer_fields):
    """A mamba header over llama's tensors: llama.cpp knows the name and fails on the weights."""
    wrong = write_foreign_gguf(tmp_path / "wrong_layout.gguf", "mamba", tokenizer_fields)
    with pytest.raises(RiverError) as raised:
        RiverModel(wrong, n_threads=2)
    message = str(raised.value)
    assert "could not load" in message and "'mamba'" in message and "did not recognise" not in message


def test_engine_graph_still_refuses_an_unlisted_architecture(unlisted_gguf):
    assert choose_backbone(unlisted_gguf, "graph").kind == GRAPH
    with pytest.raises(RiverError, match="unsupported architecture"):
        RiverModel(unlisted_gguf, engine="graph", river=None, n_threads=2)


def test_an_unreadable_header_goes_to_the_graph_loader(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 12)
    assert choose_backbone(bad).kind == GRAPH
