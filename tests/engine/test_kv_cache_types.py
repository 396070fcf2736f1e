"""The KV cache's types (type_k / type_v, csrc/kv_cache.*): a q8_0 cache holds about half
the bytes of F16; our own attention reads it with every identity it has over F16 (a
prompt's rows are the steps' bits, however cut, on any thread count, the river's K/V
among them); its states round-trip through save/load and the prompt cache, and never
load into a cache of another type; values it cannot serve are refused by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from river_cpp import LoadOptions, RiverError, RiverModel
from river_cpp.engine import _core
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.engine.compute.prompt_cache import PromptCache
from river_cpp.engine.probes.own_products import own_products

N_CTX = 256
Q8_0 = dict(type_k="q8_0", type_v="q8_0")
# (type_k, type_v) of a quantized cache
QUANTIZED = [("q8_0", "q8_0"), ("q8_0", "f16"), ("f16", "q8_0")]


def make_engine(path: Path, *, type_k: str = "f16", type_v: str = "f16", n_threads: int = 2, **options) -> _core.Engine:
    """An engine as the graph backbone makes it, with our own attention."""
    options.setdefault("own_attention", True)
    return _core.Engine(
        str(path), N_CTX, 512, n_threads, type_k=type_k, type_v=type_v, **own_products().engine_arguments(), **options
    )


def ids(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, 200, n).astype(np.int32)


def pieces(engine: _core.Engine, tokens: np.ndarray, size: int, *, prompt: bool) -> np.ndarray:
    """Every position's logits, `tokens` fed from an empty sequence `size` at a time."""
    engine.reset()
    return np.concatenate(
        [engine.forward(tokens[i : i + size], False, None, prompt) for i in range(0, len(tokens), size)]
    )


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


# ---------------------------------------------------------------- bytes


@pytest.mark.parametrize("types", QUANTIZED)
def test_a_q8_0_cache_holds_34_64ths_of_the_f16_bytes(tiny_llama_h32, types):
    """Measured from the caches as allocated: 34 bytes per 32 values against 64 for each of
    K and V quantized (both: 0.531 of F16, the format's 8.5 bits a value); the file-level
    size (kv_cache_bytes) and the engine's placement agree."""
    sizes = {}
    for pair in (("f16", "f16"), types):
        engine = make_engine(tiny_llama_h32, type_k=pair[0], type_v=pair[1])
        engine.forward(ids(4), False, None, True)
        assert (engine.type_k, engine.type_v) == pair
        sizes[pair] = engine.kv_bytes
        assert engine.kv_bytes == engine.placement_sizes()["kv_cache"]
        assert engine.kv_bytes == _core.kv_cache_bytes(str(tiny_llama_h32), N_CTX, *pair)
    ratio = sizes[types] / sizes[("f16", "f16")]
    quantized = sum(t == "q8_0" for t in types)
    assert ratio == pytest.approx(1 - quantized * (1 - 34 / 64) / 2, rel=1e-3)


# ---------------------------------------------------------------- identities


@pytest.mark.parametrize("types", QUANTIZED)
def test_prompt_rows_equal_steps_with_a_quantized_cache(tiny_llama_h32, types):
    """A prompt fed whole, in pieces of 1, 3 and 7 (as prompts and as exact rows) and one
    step at a time: every position the same bits, on 1 and 2 threads; and not the F16
    cache's logits (the cache is quantized)."""
    tokens = ids(40)
    engine = make_engine(tiny_llama_h32, type_k=types[0], type_v=types[1])
    whole = pieces(engine, tokens, len(tokens), prompt=True)
    for size in (1, 3, 7):
        for prompt in (True, False):
            assert same_bits(pieces(engine, tokens, size, prompt=prompt), whole), (size, prompt)
    one_thread = make_engine(tiny_llama_h32, type_k=types[0], type_v=types[1], n_threads=1)
    assert same_bits(pieces(one_thread, tokens, 5, prompt=True), whole)
    f16 = pieces(make_engine(tiny_llama_h32), tokens, len(tokens), prompt=True)
    assert not same_bits(f16, whole)
    np.testing.assert_allclose(whole, f16, atol=0.05 * np.abs(f16).max())


@pytest.mark.real_model
def test_the_demo_models_prompt_rows_equal_steps_with_q8_0(demo_model):
    """The demo model (heads of 64, 9 query heads over 3 KV heads): whole, in pieces of 2,
    7 and 16, and one step at a time, the same bits."""
    engine = make_engine(demo_model, **Q8_0)
    tokens = np.random.default_rng(1).integers(1, 5000, 64).astype(np.int32)
    whole = pieces(engine, tokens, len(tokens), prompt=True)
    for size, prompt in ((2, True), (7, True), (16, True), (1, False)):
        assert same_bits(pieces(engine, tokens, size, prompt=prompt), whole), size


@pytest.mark.usefixtures("river_cache")
def test_the_rivers_rows_share_the_quantized_cache(tiny_llama_h32):
    """Tokens on the river write its K/V into the q8_0 cache, which later backbone steps
    read: a prompt exiting at depth 1, then steps on the backbone, give the same bits
    however the prompt is cut; the river's layer holds other K than the backbone's."""
    tokens = ids(24, seed=3)
    options = dict(river="q4_0", prefill="exit", n_ctx=N_CTX, n_threads=2, own_attention=True, progress=False)
    with RiverModel(tiny_llama_h32, **options, **Q8_0) as model:
        rows = {}
        for size in (24, 5):
            model.reset()
            out = [model.forward(tokens[i : i + size], policy=ExitPolicy.at_layer(1)) for i in range(0, 24, size)]
            assert set(model.last_exit_layers) == {1}
            out += [model.forward([t]) for t in (7, 11, 13)]
            rows[size] = np.concatenate([np.asarray(o) for o in out])
        river_k = model.engine.read_kv(1, 0, 24)[0]
        assert same_bits(rows[24], rows[5])
        model.reset()
        model.forward(tokens)
        assert not np.array_equal(model.engine.read_kv(1, 0, 24)[0], river_k)


# ---------------------------------------------------------------- states


@pytest.mark.parametrize("types", QUANTIZED)
def test_a_quantized_state_round_trips_and_continues_alike(tiny_llama_h32, types):
    """save_kv / load_kv of the q8_0 cache (into a fresh engine too), a rewind, and the
    state's bytes: the cache's rows as stored, after a header."""
    type_k, type_v = types
    engine = make_engine(tiny_llama_h32, type_k=type_k, type_v=type_v)
    tokens = ids(20)
    whole = engine.forward(tokens, False, None, True)
    state = engine.save_kv(12)
    row = {"f16": 2 * engine.n_embd_kv, "q8_0": engine.n_embd_kv // 32 * 34}
    assert len(state) - len(engine.save_kv(0)) == engine.n_layer * 12 * (row[type_k] + row[type_v])
    layers = [engine.read_kv(il, 0, 12) for il in range(engine.n_layer)]
    fresh = make_engine(tiny_llama_h32, type_k=type_k, type_v=type_v)
    fresh.forward(ids(5, seed=9), False, None, True)  # other work first
    fresh.load_kv(12, state)
    for il, (k, v) in enumerate(layers):
        restored = fresh.read_kv(il, 0, 12)
        assert same_bits(restored[0], k) and same_bits(restored[1], v)
    assert same_bits(fresh.forward(tokens[12:], False, None, False), whole[12:])
    engine.rewind(12)
    assert same_bits(engine.forward(tokens[12:], False, None, True), whole[12:])


def test_a_state_never_loads_into_a_cache_of_another_type(tiny_llama_h32):
    """Not even K q8_0 / V f16 into K f16 / V q8_0, whose states have the same size."""
    states = {}
    for types in [("f16", "f16"), *QUANTIZED]:
        engine = make_engine(tiny_llama_h32, type_k=types[0], type_v=types[1])
        engine.forward(ids(8), False, None, True)
        states[types] = (engine, engine.save_kv(8))
    assert len(states[("q8_0", "f16")][1]) == len(states[("f16", "q8_0")][1])
    for types, (engine, _) in states.items():
        for other, (_, state) in states.items():
            if other != types:
                with pytest.raises(RiverError, match=f"saved with type_k={other[0]}, type_v={other[1]}"):
                    engine.load_kv(8, state)
        with pytest.raises(RiverError, match="not a KV cache state"):
            engine.load_kv(8, b"\0" * len(states[types][1]))


def _answer(model: RiverModel, prompt: list[int]) -> tuple[list[int], list[float], int]:
    """A greedy answer's tokens, their logprobs and the prompt positions taken from the cache."""
    chunks = list(model.generate(prompt, stream=True, max_tokens=8, temperature=0.0, logprobs=1))
    return [c.token_id for c in chunks], [c.logprob for c in chunks], chunks[0].cached_tokens


def test_the_prompt_cache_serves_a_quantized_cache_and_keeps_types_apart(tiny_llama_h32):
    """A second request that begins as the first restores that prefix from the prompt
    cache and answers as the request sent cold; a model of another cache type shares the
    PromptCache but never takes the entry."""
    cache = PromptCache(64 << 20, min_tokens=4)
    first = [int(t) for t in ids(30)]
    second = first[:20] + [int(t) for t in ids(6, seed=5)]
    options = dict(river=None, n_ctx=N_CTX, n_threads=2, progress=False, own_attention=True)
    with RiverModel(tiny_llama_h32, prompt_cache=cache, **options, **Q8_0) as warm:
        _answer(warm, first)
        warm.reset()
        tokens, logprobs, cached = _answer(warm, second)
        assert cached >= 16
    with RiverModel(tiny_llama_h32, **options, **Q8_0) as cold:
        assert (tokens, logprobs) == _answer(cold, second)[:2]
    with RiverModel(tiny_llama_h32, prompt_cache=cache, **options) as f16:
        assert _answer(f16, second)[2] == 0


# ---------------------------------------------------------------- refusals


def test_bad_cache_types_are_refused_by_name(tiny_llama_h32, tiny_llama):
    with pytest.raises(ValueError, match="type_k must be one of 'f16' \\(1\\), 'q8_0' \\(8\\)"):
        LoadOptions(type_k="q4_k")
    with pytest.raises(ValueError, match="type_v must be one of"):
        LoadOptions(type_v=2, own_attention=True)
    with pytest.raises(ValueError, match="type_k must be one of"):
        LoadOptions(type_k=True)
    with pytest.raises(ValueError, match="type_v='q8_0' needs own_attention=True"):
        LoadOptions(type_v="q8_0", own_attention=False)
    assert (LoadOptions(type_k=8, type_v="Q8_0", own_attention=True).type_k, LoadOptions(type_k=None).type_k) == (
        "q8_0",
        "f16",
    )
    with pytest.raises(RiverError, match="f16 or q8_0, not 'q4_0'"):
        make_engine(tiny_llama_h32, type_k="q4_0")
    with pytest.raises(RiverError, match="do not tile this model's heads of 16"):
        make_engine(tiny_llama, type_k="q8_0")
    engine = make_engine(tiny_llama_h32, type_v="q8_0", own_attention=False)
    with pytest.raises(RiverError, match="type_v=q8_0 needs river-cpp's own attention"):
        engine.forward(ids(3), False, None, True)
    with pytest.raises(ValueError, match="type_k='q8_0' needs river-cpp's graph backbone"):
        RiverModel(tiny_llama_h32, engine="llama.cpp", river=None, type_k="q8_0")


def test_a_quantized_cache_on_a_device_is_refused(tiny_llama_h32):
    """ggml's attention on a device keeps an F16 cache: the engine says so when placed."""
    if "Vulkan0" not in [d["name"] for d in _core.devices()]:
        pytest.skip("no Vulkan device in this ggml (scripts/install_with_devices.sh adds lavapipe's)")
    engine = make_engine(tiny_llama_h32, type_k="q8_0")
    with pytest.raises(RiverError, match="type_k=q8_0 needs the KV cache in host memory"):
        engine.place(["Vulkan0"] * engine.n_layer, [], "CPU", "CPU", "Vulkan0")
    assert not engine.placed


def test_ggml_attention_reads_a_q8_0_k(tiny_llama_h32):
    """K alone quantized, with ggml's attention (own_attention=False): its products by a
    q8_0 K run (on queries ggml quantizes to 8 bits too) and move the logits from ggml's
    F16 cache's about as far as a q8_0 K moves ours (the tiny random model's logits move
    by a few tenths of their range of 170 either way)."""
    tokens = ids(24)
    rows = {
        (own, type_k): make_engine(tiny_llama_h32, type_k=type_k, own_attention=own).forward(tokens, False, None, True)
        for own in (True, False)
        for type_k in ("f16", "q8_0")
    }
    moved = {own: np.abs(rows[own, "q8_0"] - rows[own, "f16"]).mean() for own in (True, False)}
    assert np.isfinite(rows[False, "q8_0"]).all()
    assert 0 < moved[False] < 1.5 * moved[True]
