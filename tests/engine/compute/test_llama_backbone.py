"""The llama.cpp backbone (river_cpp.engine.compute.llama_backbone) and the choice of backbone
(river_cpp.engine.decisions.backbone_choice), on tiny random files of architectures our graph does
not build (tests/foreign_archs.py) and on real models against the graph."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import numpy as np
import pytest
from foreign_archs import ARCHITECTURES, write_foreign_gguf
from llama_run import llama_cpp_greedy

from river_cpp import ExitPolicy, Llama, RiverModel

# Text that repeats itself, so that n-gram drafts have something to copy.
GROUNDED = (
    "Rewrite the list. List: apples, pears, plums, cherries, apples, pears, plums, cherries. "
    "Rewritten: apples, pears, plums, cherries, apples, pears,"
)


@pytest.fixture(scope="module", params=ARCHITECTURES)
def foreign_gguf(request, tmp_path_factory, tokenizer_fields) -> Path:
    folder = tmp_path_factory.mktemp("foreign")
    return write_foreign_gguf(folder / f"tiny_{request.param}.gguf", request.param, tokenizer_fields, seed=3)


@pytest.fixture(scope="module")
def foreign_model(foreign_gguf: Path) -> RiverModel:
    with RiverModel(foreign_gguf, n_ctx=512, n_threads=2) as model:
        yield model


def test_foreign_architecture_loads_on_llama_cpp(foreign_model):
    choice = foreign_model.backbone_choice
    assert choice.kind == "llama.cpp"
    assert choice.arch in ARCHITECTURES and choice.arch in choice.reason
    assert not foreign_model.has_river and foreign_model.river_choice is None
    assert foreign_model.n_layer == 2


def test_greedy_equals_llama_cpp(foreign_model, foreign_gguf):
    ids = foreign_model.tokenize("The history of the river")
    ours = foreign_model.generate(ids, max_tokens=24, temperature=0, speculative=False)
    assert ours.token_ids == llama_cpp_greedy(foreign_gguf, ids, len(ours.token_ids))


def test_drafted_equals_plain(foreign_model):
    """The default drafts (n-grams, then the memory of the first answer, which the
    second copies) verify on llama.cpp's context to exactly the plain tokens."""
    ids = foreign_model.tokenize(GROUNDED)
    plain = foreign_model.generate(ids, max_tokens=48, temperature=0, speculative=False)
    for _ in range(2):
        drafted = foreign_model.generate(ids, max_tokens=48, temperature=0)
        assert drafted.token_ids == plain.token_ids
    assert drafted.speculative is not None and drafted.speculative.accepted > 0


def test_river_and_exits_refused_with_the_architecture(foreign_gguf, foreign_model):
    arch = foreign_model.backbone_choice.arch
    with pytest.raises(ValueError, match=f"'{arch}' runs on llama.cpp's backbone"):
        RiverModel(foreign_gguf, river="q4_0")
    with pytest.raises(ValueError, match=f"'{arch}' runs on llama.cpp's backbone"):
        foreign_model.generate("hi", max_tokens=2, policy=ExitPolicy.uniform(0.9))
    with pytest.raises(ValueError, match="no river-cpp engine"):
        _ = foreign_model.engine


def test_drop_in_llama(foreign_gguf, foreign_model):
    ids = foreign_model.tokenize("Once upon a time")
    expected = foreign_model.generate(ids, max_tokens=8, temperature=0, speculative=False).text
    llm = Llama(model_path=str(foreign_gguf), n_ctx=256, n_threads=2, verbose=False)
    try:
        out = llm("Once upon a time", max_tokens=8, temperature=0)
        assert out["choices"][0]["text"] == expected
    finally:
        llm.close()


@pytest.mark.server
def test_served(foreign_model):
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    openai = pytest.importorskip("openai")
    from river_cpp.apps.server import ServerConfig, build, make_server

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    config = ServerConfig(port=sock.getsockname()[1], keepalive_seconds=0.5)
    app, worker = build(lambda: foreign_model, config, "tiny")
    server = make_server(app, config, log_level="warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        assert worker.ready.wait(10)
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{config.port}/v1", api_key="unused", max_retries=0, timeout=30
        )
        reply = client.completions.create(model="tiny", prompt=GROUNDED, max_tokens=8, temperature=0)
        ids = foreign_model.tokenize(GROUNDED)
        expected = foreign_model.generate(ids, max_tokens=8, temperature=0, speculative=False).text
        assert reply.choices[0].text == expected
    finally:
        server.should_exit = True
        thread.join(10)
        worker.stop()
        sock.close()


def test_engine_option_validated(foreign_gguf):
    with pytest.raises(ValueError, match="engine must be one of"):
        RiverModel(foreign_gguf, engine="vllm")


def test_prompt_cache_reused(foreign_model):
    ids = foreign_model.tokenize(GROUNDED)
    first = foreign_model.generate(ids, max_tokens=8, temperature=0, speculative=False)
    assert foreign_model.cached_prefix(ids) == len(ids) - 1
    again = foreign_model.generate(ids, max_tokens=8, temperature=0, speculative=False)
    assert again.token_ids == first.token_ids


# ---------------------------------------------------------------- real models, both backbones


@pytest.mark.real_model
@pytest.mark.slow
def test_llama_cpp_backbone_equals_graph_on_f16(qwen05_backbone):
    """On an F16 file both backbones give the same greedy tokens, plain."""
    runs = {}
    for engine in ("graph", "llama.cpp"):
        with RiverModel(qwen05_backbone, engine=engine, river=None, n_ctx=512, n_threads=2) as model:
            ids = model.tokenize("def fibonacci(n):\n    ")
            runs[engine] = model.generate(ids, max_tokens=32, temperature=0, speculative=False).token_ids
            assert model.backbone_choice.kind == engine
    assert runs["graph"] == runs["llama.cpp"]
    assert np.unique(runs["graph"]).size > 1


# ---------------------------------------------------------------- the command line


def test_cli_generates_and_says_which_backbone(foreign_gguf, capsys):
    from river_cpp.apps.cli import main

    assert main(["generate", "The river", "--model", str(foreign_gguf), "-n", "6", "-t", "2", "-v"]) == 0
    err = capsys.readouterr().err
    assert "backbone: llama.cpp" in err
    assert main(["info", str(foreign_gguf)]) == 0
    out = capsys.readouterr().out
    assert "backbone: llama.cpp" in out and "river-cpp's graph builds" in out


def test_cli_engine_graph_refuses_a_foreign_file(foreign_gguf, capsys):
    from river_cpp.apps.cli import main

    argv = ["generate", "Hi", "--model", str(foreign_gguf), "-n", "2", "--engine", "graph", "--river", "none"]
    assert main(argv) != 0
    assert "unsupported architecture" in capsys.readouterr().err


def test_graph_file_on_llama_cpp_by_choice(tiny_llama4):
    with RiverModel(tiny_llama4, engine="llama.cpp", n_threads=2) as fallback:
        assert fallback.backbone_choice.kind == "llama.cpp" and not fallback.has_river
        ids = fallback.tokenize("Hello there")
        on_llama_cpp = fallback.generate(ids, max_tokens=12, temperature=0, speculative=False).token_ids
    with RiverModel(tiny_llama4, engine="graph", river=None, n_threads=2) as graph:
        assert graph.generate(ids, max_tokens=12, temperature=0, speculative=False).token_ids == on_llama_cpp
