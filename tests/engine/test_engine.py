"""The engine without a river: parity with llama.cpp, cache rewind, clear errors."""

from __future__ import annotations

import llama_cpp
import numpy as np
import pytest
from llama_run import llama_logits_and_greedy, llama_run

from river_cpp import RiverError, RiverModel
from river_cpp.engine import _core
from river_cpp.engine.probes.extra_bufts import REPACK, extra_bufts

PROMPT = "Once upon a time, in a small village by the sea, there lived"


def our_logits_and_greedy(path, ids, n_tokens):
    # ggml's attention, as llama.cpp's: greedy tokens of random models meet near-ties
    with RiverModel(path, river=None, n_ctx=256, n_threads=2, own_attention=False) as model:
        logits = model.forward(ids)
        tokens = [int(logits[-1].argmax())]
        while len(tokens) < n_tokens:
            tokens.append(int(model.forward([tokens[-1]], last_only=True)[0].argmax()))
        return logits, tokens


@pytest.mark.parametrize(
    "fixture",
    [
        "tiny_llama",
        "tiny_llama4",
        "tiny_qwen2",
        "tiny_qwen3",
        "tiny_llama3",
        "tiny_mistral",
        "tiny_gemma3",
        pytest.param("demo_backbone", marks=pytest.mark.real_model),
    ],
)
@pytest.mark.slow
def test_parity_with_llama_cpp(fixture, request):
    path = request.getfixturevalue(fixture)
    ids = llama_cpp.Llama(str(path), vocab_only=True, verbose=False).tokenize(PROMPT.encode())
    ours, ours_greedy = our_logits_and_greedy(path, ids, 64)
    theirs, theirs_greedy = llama_logits_and_greedy(path, ids, 64)
    # llama.cpp's own batched and one-token passes differ by ~0.03 on the F16 demo model
    scale = np.abs(theirs).max()
    assert np.abs(ours - theirs).max() < 0.01 * scale
    assert (ours.argmax(-1) == theirs.argmax(-1)).all()
    assert ours_greedy == theirs_greedy


@pytest.mark.parametrize("fixture", ["qwen05_backbone", "gemma270_backbone"])
@pytest.mark.real_model
@pytest.mark.slow
def test_real_model_parity(fixture, request):
    """Prompt logits, and decode steps along llama.cpp's greedy path, of real releases."""
    path = request.getfixturevalue(fixture)
    ids = llama_cpp.Llama(str(path), vocab_only=True, verbose=False).tokenize(PROMPT.encode())
    theirs = llama_run(path, ids, 32)
    with RiverModel(path, river=None, n_ctx=256, n_threads=2) as model:
        ours = model.forward(ids)
        decode = theirs.decode_along(model, ours)
    tolerance = 0.01 * np.abs(theirs.logits).max()
    assert np.abs(ours - theirs.logits).max() < tolerance
    theirs.assert_decode_matches(decode, tolerance, min_decided=16)


def test_rewind_matches_fresh_run(tiny_llama4):
    with RiverModel(tiny_llama4, river=None, n_ctx=128) as model:
        ids = model.tokenize(PROMPT)
        model.forward(ids[:5])
        first = model.forward(ids[5:])
        model.forward([11, 12, 13])
        model.rewind(5)
        assert model.n_past == 5
        np.testing.assert_array_equal(model.forward(ids[5:]), first)
        model.reset()
        model.forward(ids[:5])
        np.testing.assert_array_equal(model.forward(ids[5:]), first)


@pytest.mark.parametrize("river", [None, "q4_0"])
def test_reused_graphs_equal_fresh_ones_across_growing_n_kv(tiny_llama4, river, river_cache):
    """Decode steps reuse one graph per shape; the padded n_kv grows past 256 on the
    way (a new shape). Reuse must not change a single bit of the logits, on every
    route: the backbone, the river and tau exits that switch between segments."""
    from river_cpp.engine.compute.policy import ExitPolicy

    options = dict(river=river, n_ctx=640, n_threads=1)
    if river:
        options["policy"] = ExitPolicy.uniform(0.9, min_layer=1)
    with RiverModel(tiny_llama4, **options) as reused, RiverModel(tiny_llama4, **options, reuse_graphs=False) as fresh:
        rng = np.random.default_rng(0)
        ids = [int(i) for i in rng.integers(0, reused.n_vocab, 300)]
        prompt = ids[:20]
        rows = [reused.forward(prompt, last_only=False)]
        expected = [fresh.forward(prompt, last_only=False)]
        for i in range(20, 300):
            batch = ids[i : i + (1 if i % 2 else 2)]
            rows.append(reused.forward(batch, last_only=False))
            expected.append(fresh.forward(batch, last_only=False))
            assert list(reused.last_exit_layers) == list(fresh.last_exit_layers)
        assert reused.n_past > 256
        for ours, theirs in zip(rows, expected):
            np.testing.assert_array_equal(ours, theirs)
        stats, fresh_stats = reused.engine.graph_stats, fresh.engine.graph_stats
        assert fresh_stats["reuses"] == 0
        assert stats["reuses"] > 5 * stats["builds"]


@pytest.mark.real_model
def test_host_matrices_are_repacked(demo_backbone, monkeypatch):
    """The CPU's faster layouts are used for the matrices that stay in the mapped
    files: when they were silently skipped, Q4_0 decode fell to 0.73x llama.cpp's."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the repacked Q4_0 layouts this checks are the x86-64 ones")
    monkeypatch.delenv("RIVER_CPP_CACHE_DIR", raising=False)
    monkeypatch.setenv("RIVER_CPP_OWN_PRODUCTS", "none")  # ggml's kernels: what CPU_REPACK is for
    decision = extra_bufts()
    if REPACK not in decision.allowed:
        pytest.skip(f"this host does not use {REPACK}: {decision.why_not(REPACK)}")
    with RiverModel(demo_backbone, river="q4_0", river_head="q4_0", n_ctx=64, progress=False) as model:
        # every river matrix and its head: 7 per layer + 1
        assert model.engine.repacked_tensors >= 7 * model.n_layer + 1


def test_our_products_take_the_matrices_of_the_types_they_cover(demo_backbone, monkeypatch):
    """With our own products (the default where their probe passed), the Q4_0 river's
    matrices are packed for them and none is left to CPU_REPACK."""
    monkeypatch.delenv("RIVER_CPP_CACHE_DIR", raising=False)
    monkeypatch.setenv("RIVER_CPP_OWN_PRODUCTS", "reference")  # whatever this CPU runs
    with RiverModel(demo_backbone, river="q4_0", river_head="q4_0", n_ctx=64, progress=False) as model:
        model.forward([1, 2])
        assert model.engine.own_products.get("q4_0", 0) >= 7 * model.n_layer + 1
        assert model.engine.own_kernels == "reference"
        assert model.engine.repacked_tensors == 0


def test_each_forward_runs_under_the_exit_config_it_is_given(tiny_llama4, river_cache):
    """The engine holds no exit setting between forwards: each runs under the
    ExitConfig it is handed, None the full backbone, whatever came before."""
    from river_cpp.engine import _core

    inf = float("inf")
    with RiverModel(tiny_llama4, river="q4_0", n_ctx=64, n_threads=1) as model:
        engine, n_layer = model.engine, model.n_layer
        on_river = _core.ExitConfig([-inf] + [inf] * (n_layer - 1))
        at_two = _core.ExitConfig([inf, inf, -inf] + [inf] * (n_layer - 3))
        engine.forward(np.array([1, 2, 3], dtype=np.int32), False, on_river)
        assert list(engine.last_exit_layers) == [0, 0, 0]
        engine.forward(np.array([4], dtype=np.int32), True)
        assert list(engine.last_exit_layers) == [n_layer]
        engine.forward(np.array([5], dtype=np.int32), True, at_two)
        assert list(engine.last_exit_layers) == [2]
        engine.forward(np.array([6], dtype=np.int32), True, None)
        assert list(engine.last_exit_layers) == [n_layer]
        with pytest.raises(RiverError, match="one value per layer"):
            engine.forward(np.array([7], dtype=np.int32), True, _core.ExitConfig([0.5] * (n_layer + 1)))
        with pytest.raises(RiverError, match="exit_vocab"):
            engine.forward(np.array([7], dtype=np.int32), True, _core.ExitConfig([-inf] * n_layer, exit_vocab=1 << 30))
        assert engine.n_past == 6
    with pytest.raises(RiverError, match="NaN"):
        _core.ExitConfig([float("nan")])
    with pytest.raises(RiverError, match="signal"):
        _core.ExitConfig([1.0], "sine")


def test_last_only_is_the_last_row(tiny_llama):
    with RiverModel(tiny_llama, river=None) as model:
        ids = model.tokenize(PROMPT)
        full = model.forward(ids)
        model.reset()
        last = model.forward(ids, last_only=True)
        assert last.shape == (1, model.n_vocab)
        np.testing.assert_allclose(last[0], full[-1], rtol=0, atol=1e-4)


def test_long_input_is_split_into_batches(tiny_llama):
    with RiverModel(tiny_llama, river=None, n_ctx=1200) as model:
        ids = list(np.random.default_rng(0).integers(0, model.n_vocab, 1100))
        logits = model.forward(ids)
        assert logits.shape == (1100, model.n_vocab) and np.isfinite(logits).all()
        assert model.n_past == 1100


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        RiverModel(tmp_path / "nope.gguf")


def test_not_a_gguf(not_a_gguf):
    with pytest.raises(RiverError, match="not a GGUF"):
        RiverModel(not_a_gguf, river=None)


def test_truncated_gguf(truncated_gguf):
    with pytest.raises(RiverError, match="truncated"):
        RiverModel(truncated_gguf, river=None)


def test_damaged_header(tiny_llama, tmp_path):
    path = tmp_path / "damaged.gguf"
    data = bytearray(tiny_llama.read_bytes()[:4096])
    data[8:16] = (2**62).to_bytes(8, "little")  # absurd tensor count
    path.write_bytes(bytes(data))
    with pytest.raises(RiverError, match="malformed GGUF .*tensor count 4611686018427387904"):
        RiverModel(path, river=None)


def test_unsupported_architecture(unsupported_arch_gguf):
    with pytest.raises(RiverError, match="unsupported architecture 'mamba'"):
        RiverModel(unsupported_arch_gguf, river=None, engine="graph")
    # the default hands it to llama.cpp, whose loader refuses a mamba made of llama tensors
    with pytest.raises(RiverError, match="llama.cpp .*could not load .* \\(architecture 'mamba'"):
        RiverModel(unsupported_arch_gguf, river=None)


def test_unsupported_rope_scaling(make_tiny_gguf):
    path = make_tiny_gguf("tiny_yarn", metadata={"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0})
    with pytest.raises(RiverError, match="rope scaling 'yarn' is not supported"):
        RiverModel(path, river=None)


def test_prompt_longer_than_context(tiny_llama):
    with RiverModel(tiny_llama, river=None, n_ctx=16) as model:
        with pytest.raises(ValueError, match="context overflow"):
            model.forward(list(range(17)))
        model.forward(list(range(10)))
        with pytest.raises(ValueError, match="context overflow"):
            model.forward(list(range(7)))
        assert model.n_past == 10


@pytest.mark.parametrize(
    "ids, error",
    [([], ValueError), ([[1, 2]], ValueError), ([1.5], TypeError), ([-1], RiverError), ([10**6], RiverError)],
)
def test_bad_token_ids(tiny_llama, ids, error):
    with RiverModel(tiny_llama, river=None) as model:
        with pytest.raises(error):
            model.forward(ids)


@pytest.mark.parametrize(
    "option",
    [{"n_ctx": 0}, {"n_ctx": -5}, {"n_threads": 0}, {"n_ctx": "big"}, {"prefill": "later"}, {"tail_layers": -1}],
)
def test_nonsense_options(tiny_llama, option):
    with pytest.raises(ValueError):
        RiverModel(tiny_llama, **option)


def test_closed_model_raises(tiny_llama):
    model = RiverModel(tiny_llama, river=None)
    model.close()
    model.close()
    with pytest.raises(ValueError, match="closed"):
        model.forward([1])


def test_a_log_sink_does_not_crash_the_process_at_exit():
    """RiverModel(verbose=True) (`river-cpp generate -v`) installs a Python log sink;
    kept in a C++ static past the interpreter's end, it aborted every such process at exit."""
    import subprocess
    import sys

    code = "from river_cpp.engine import _core; _core.set_log_sink(lambda level, message: None)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_kept_graphs_and_their_buffers_are_reported(tiny_llama):
    """graph_stats says how many graphs the engine keeps and what their compute buffers
    hold: one per new shape of a short batch, none for a prompt (built for its one use)."""
    engine = _core.Engine(str(tiny_llama), 256, 256, 1)
    engine.forward(list(range(10, 110)), True)
    assert engine.graph_stats["kept_graphs"] == 0
    for n in (1, 2, 3):
        engine.rewind(100)
        engine.forward(list(range(20, 20 + n)), False)
    stats = engine.graph_stats
    assert stats["kept_graphs"] == 3 and stats["kept_bytes"] > 0
    engine.rewind(100)
    engine.forward([20, 21], False)  # a shape kept before: reused
    assert engine.graph_stats["kept_graphs"] == 3 and engine.graph_stats["reuses"] == stats["reuses"] + 1
