"""The river: shared-KV early exit checked against llama.cpp and a numpy reference."""

from __future__ import annotations

import shutil

import gguf
import numpy as np
import pytest
from hybrid import write_hybrid_gguf
from llama_run import llama_run
from reference_llama import ReferenceLlama
from routes import PAPER_RIVER

from river_cpp import RiverError, RiverModel
from river_cpp.engine.compute.policy import ExitPolicy

PROMPT = "The old lighthouse keeper"


pytestmark = pytest.mark.usefixtures("river_cache")  # rivers of tiny models: a per-test cache


def test_never_equals_backbone_without_river(tiny_llama4):
    with (
        RiverModel(tiny_llama4, river=None, n_ctx=128) as plain,
        RiverModel(tiny_llama4, river="q4_0", policy=ExitPolicy.never(), n_ctx=128) as river,
    ):
        ids = plain.tokenize(PROMPT)
        np.testing.assert_array_equal(plain.forward(ids), river.forward(ids))
        assert list(river.last_exit_layers) == [river.n_layer] * len(ids)
        np.testing.assert_array_equal(plain.forward([42]), river.forward([42]))


# every split of the 4-layer llama; for the other families k = 1, where one token's
# layers come from both weight sets
SPLITS = [("tiny_llama4", k) for k in (0, 1, 2)] + [
    (family, 1) for family in ("tiny_qwen2", "tiny_qwen3", "tiny_llama3", "tiny_mistral", "tiny_gemma3")
]


@pytest.mark.parametrize("fixture, k", SPLITS)
@pytest.mark.slow
def test_static_split_equals_llama_cpp_hybrid(fixture, k, request, tmp_path, monkeypatch):
    # The graph's wiring against llama.cpp's, with the same kernels on both sides: these
    # random models' logits reach ~60, where our own products' columns (F32 scales per
    # 32 values, llama.cpp's F16) move them by 1-2, as much as a wrong route would.
    # test_static_split_real_models compares our own products with llama.cpp's.
    monkeypatch.setenv("RIVER_CPP_OWN_PRODUCTS", "none")
    backbone = request.getfixturevalue(fixture)
    # and ggml's attention, as llama.cpp's (ours keeps q and the weights in F32, not F16)
    with RiverModel(backbone, **PAPER_RIVER, policy=ExitPolicy.at_layer(k), n_ctx=128, own_attention=False) as model:
        ids = model.tokenize(PROMPT)
        ours = model.forward(ids)
        assert list(model.last_exit_layers) == [k] * len(ids)
        hybrid = write_hybrid_gguf(backbone, model.river_path, k, tmp_path / f"hybrid{k}.gguf")
        theirs = llama_run(hybrid, ids, 32)
        # decode along llama.cpp's greedy path, one token per step
        decode = theirs.decode_along(model, ours)
        assert set(model.last_exit_layers) == {k}
    assert np.abs(ours - theirs.logits).max() < 5e-2
    # Once the cache holds a few positions, llama.cpp's attention sums in another
    # order (~0.01 in F16/F32 logits), and 4-bit matmuls, which requantize their
    # input, amplify that to up to ~0.6. A wrong route or cache is off by 3-25 here.
    theirs.assert_decode_matches(decode, 1.0, min_decided=8)


@pytest.mark.parametrize("fixture, k", [("demo_backbone", 15), ("qwen05_backbone", 12), ("gemma270_backbone", 9)])
@pytest.mark.real_model
@pytest.mark.slow
def test_static_split_real_models(fixture, k, request, tmp_path, monkeypatch):
    monkeypatch.delenv("RIVER_CPP_CACHE_DIR")  # real rivers live in the user cache
    backbone = request.getfixturevalue(fixture)
    # ggml's attention, as llama.cpp's: the tolerance is llama.cpp's own spread, and ours
    # (q and the weights in F32, not F16) moves the 4-bit river's logits by up to ~1.1
    with RiverModel(
        backbone,
        **PAPER_RIVER,
        policy=ExitPolicy.at_layer(k),
        n_ctx=256,
        n_threads=2,
        progress=False,
        own_attention=False,
    ) as model:
        ids = model.tokenize(PROMPT)
        ours = model.forward(ids)
        hybrid = write_hybrid_gguf(backbone, model.river_path, k, tmp_path / f"hybrid{k}.gguf")
        theirs = llama_run(hybrid, ids, 32)
        decode = theirs.decode_along(model, ours)
        model.reset()
        route_gap = np.abs(model.forward(ids, policy=ExitPolicy.never()) - theirs.logits).max()
    # llama.cpp's own batched and one-token evaluations of 4-bit weights differ by up
    # to ~0.8 in logits on the demo model (accumulation order); a wrong route or cache
    # differs by several units, as the backbone itself does (route_gap).
    tolerance = 1.0
    assert route_gap > 3 * tolerance
    assert np.abs(ours - theirs.logits).max() < tolerance
    theirs.assert_decode_matches(decode, tolerance, min_decided=8)


@pytest.mark.slow
def test_mixed_exits_fill_cache_with_each_tokens_weights(tiny_llama4):
    """Every (position, layer) slot holds the K/V of the weight set that token used."""
    prompt_depth, decode_depths = 2, [0, 3, 1, 4, 2, 0, 4, 1]
    with RiverModel(tiny_llama4, **PAPER_RIVER, n_ctx=64) as model:
        ids = model.tokenize(PROMPT)
        model.forward(ids, policy=ExitPolicy.at_layer(prompt_depth))
        exits = list(model.last_exit_layers)
        tokens = list(ids)
        for depth, token in zip(decode_depths, [7, 99, 512, 3, 77, 1000, 5, 64]):
            model.forward([token], policy=ExitPolicy.at_layer(depth))
            exits.append(int(model.last_exit_layers[0]))
            tokens.append(token)
        assert exits == [prompt_depth] * len(ids) + decode_depths
        cache = [model.engine.read_kv(il, 0, len(tokens)) for il in range(model.n_layer)]

        reference = ReferenceLlama(tiny_llama4, model.river_path)
        wrong_route = ReferenceLlama(tiny_llama4, model.river_path)
        for token, depth in zip(tokens, exits):
            reference.step(token, depth)
            wrong_route.step(token, model.n_layer)  # all backbone
    # Error per slot, relative to the row's scale: ggml quantizes activations to 8 bits
    # for 4-bit matmuls (~1-3%), while the other weight set's K/V is off by 7-45%.
    right = np.array([relative_row_error(k, reference.keys[il]) for il, (k, _) in enumerate(cache)])
    right_v = np.array([relative_row_error(v, reference.values[il]) for il, (_, v) in enumerate(cache)])
    wrong = np.array([relative_row_error(k, wrong_route.keys[il]) for il, (k, _) in enumerate(cache)])
    assert right.max() < 0.04 and right_v.max() < 0.04
    on_river = np.array([[il >= d for d in exits] for il in range(len(cache))])
    assert wrong[on_river].mean() > 4 * right[on_river].mean()


def relative_row_error(got: np.ndarray, want: list[np.ndarray]) -> np.ndarray:
    want = np.stack(want)
    return np.abs(got - want).max(axis=1) / np.abs(want).max(axis=1)


@pytest.mark.real_model
@pytest.mark.slow
def test_similarity_exits_replay_as_forced_route(demo_backbone, monkeypatch):
    """Token-level exits chosen by similarity equal the same depths forced token by token."""
    monkeypatch.delenv("RIVER_CPP_CACHE_DIR")
    kwargs = dict(n_ctx=256, n_threads=2, progress=False)
    with RiverModel(demo_backbone, **PAPER_RIVER, policy=ExitPolicy.uniform(0.97, min_layer=2), **kwargs) as model:
        ids = model.tokenize(PROMPT)
        logits = model.forward(ids, last_only=True)
        exits = [int(model.last_exit_layers[-1])]
        rows, tokens = [logits[0]], []
        for _ in range(24):
            tokens.append(int(rows[-1].argmax()))
            rows.append(model.forward([tokens[-1]], last_only=True)[0])
            exits.append(int(model.last_exit_layers[0]))
        assert len(set(exits)) > 2, f"exits did not vary: {exits}"
        cache = [model.engine.read_kv(il, 0, model.n_past) for il in range(0, model.n_layer, 7)]

        model.reset()
        replay = []
        for depth, chunk in zip(exits, [ids] + [[t] for t in tokens]):
            replay.append(model.forward(chunk, last_only=True, policy=ExitPolicy.at_layer(depth))[0])
        np.testing.assert_array_equal(np.stack(rows), np.stack(replay))
        for i, il in enumerate(range(0, model.n_layer, 7)):
            np.testing.assert_array_equal(cache[i][0], model.engine.read_kv(il, 0, model.n_past)[0])


@pytest.mark.parametrize("head", ["q4_0", False])
@pytest.mark.real_model
@pytest.mark.slow
def test_exit_vocab_scores_a_prefix_of_the_vocabulary(demo_backbone, monkeypatch, head):
    """Exited tokens with exit_vocab K: the first K logits are the full head's, bit for
    bit, the rest -inf; backbone tokens keep the whole vocabulary. K is not a multiple
    of the CPU's repacked row groups (a view ending inside a group computed garbage)."""
    monkeypatch.delenv("RIVER_CPP_CACHE_DIR")
    options = dict(river="q4_0", river_head=head, n_ctx=128, n_threads=2, progress=False)
    with RiverModel(demo_backbone, policy=ExitPolicy.at_layer(0), **options) as model:
        ids = model.tokenize(PROMPT)
        model.forward(ids, route="backbone")
        base = model.n_past
        full = model.forward(ids[:3], route="decode")
        backbone = model.forward(ids[:3], route="backbone")
        model.rewind(base)
        for k in (1001, 17, model.n_vocab - 5):
            part = model.forward(ids[:3], route="decode", exit_vocab=k)
            np.testing.assert_array_equal(part[:, :k], full[:, :k])
            assert np.isneginf(part[:, k:]).all()
            np.testing.assert_array_equal(model.forward(ids[:3], route="backbone", exit_vocab=k), backbone)
            model.rewind(base)
        np.testing.assert_array_equal(model.forward(ids[:3], route="decode"), full)  # a forward's own setting
        for bad in (0, model.n_vocab + 1, 2.5):
            with pytest.raises(ValueError, match="exit_vocab"):
                model.forward(ids[:3], route="decode", exit_vocab=bad)


@pytest.mark.parametrize("signal", ["cosine", "update_norm"])
@pytest.mark.slow
def test_state_signal_matches_numpy(tiny_llama4, signal):
    """The signal the engine compares with the thresholds, recomputed from numpy states."""
    # a threshold no signal reaches: every depth is checked and none exits
    with RiverModel(tiny_llama4, policy=ExitPolicy.uniform(2.0, min_layer=1, signal=signal)) as model:
        reference = ReferenceLlama(tiny_llama4, model.river_path)
        for token in model.tokenize(PROMPT):
            model.forward([token])
            reference.step(token, model.n_layer)
            before, after = np.stack(reference.states[:-1]), np.stack(reference.states[1:])
            if signal == "cosine":
                want = (before * after).sum(1) / np.linalg.norm(before, axis=1) / np.linalg.norm(after, axis=1)
            else:
                want = 1 - np.linalg.norm(after - before, axis=1) / np.linalg.norm(before, axis=1)
            got = model.engine.last_similarities
            # depth d's signal compares the states entering and leaving block d-1
            np.testing.assert_allclose(got[1:], want[:-1], atol=2e-3)
            assert list(model.last_exit_layers) == [model.n_layer]


def test_river_rebuilt_when_backbone_changes(make_tiny_gguf, tmp_path):
    backbone = tmp_path / "model.gguf"
    shutil.copy(make_tiny_gguf("tiny_seed1", seed=1), backbone)
    with RiverModel(backbone, river="q8_0", policy=ExitPolicy.at_layer(0)) as model:
        river_path, first = model.river_path, model.forward([1, 2, 3])
    shutil.copy(make_tiny_gguf("tiny_seed2", seed=2), backbone)
    with RiverModel(backbone, river="q8_0", policy=ExitPolicy.at_layer(0)) as model:
        assert model.river_path == river_path
        second = model.forward([1, 2, 3])
    with RiverModel(make_tiny_gguf("tiny_seed2", seed=2), river="q8_0", policy=ExitPolicy.at_layer(0)) as model:
        fresh = model.forward([1, 2, 3])
    assert not np.allclose(first, second)
    np.testing.assert_array_equal(second, fresh)


def test_damaged_river_cache_is_rebuilt(tiny_llama):
    with RiverModel(tiny_llama, policy=ExitPolicy.at_layer(0)) as model:
        river_path, expected = model.river_path, model.forward([5, 6, 7])
    with open(river_path, "r+b") as f:
        f.truncate(river_path.stat().st_size // 2)
    with RiverModel(tiny_llama, policy=ExitPolicy.at_layer(0)) as model:
        np.testing.assert_array_equal(model.forward([5, 6, 7]), expected)


def test_mismatched_river_raises(tiny_llama, tiny_llama4, make_tiny_gguf):
    with RiverModel(tiny_llama4) as four_layers:
        river4 = four_layers.river_path
    with pytest.raises(RiverError, match="does not match its backbone"):
        RiverModel(tiny_llama, river=river4)
    narrow = make_tiny_gguf("tiny_narrow", n_layer=4, n_embd=32)
    with pytest.raises(
        RiverError, match="does not match its backbone: 'llama.embedding_length' is 64 in the river, 32 in the backbone"
    ):
        RiverModel(narrow, river=river4)
    with pytest.raises(RiverError, match="not a river"):
        RiverModel(tiny_llama, river=tiny_llama)


@pytest.mark.parametrize("name, message", [("iq2_xxs", "importance matrix"), ("q9_9", "unknown river type")])
def test_unusable_river_types_raise(tiny_llama, name, message):
    with pytest.raises(RiverError, match=message):
        RiverModel(tiny_llama, river=name)


@pytest.mark.slow
def test_per_layer_river_types_and_backbone_tail(tiny_llama4):
    with RiverModel(
        tiny_llama4, river="q4_0", river_types={2: "q8_0"}, tail_layers=1, policy=ExitPolicy.at_layer(1), n_ctx=64
    ) as model:
        types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(model.river_path).tensors}
        assert types["blk.2.attn_q.weight"] == "Q8_0"
        assert types["blk.1.attn_q.weight"] == types["blk.3.ffn_down.weight"] == "Q4_0"
        tokens = model.tokenize(PROMPT)
        for token in tokens:
            model.forward([token])
        assert list(model.last_exit_layers) == [1]
        cache = [model.engine.read_kv(il, 0, len(tokens))[0] for il in range(model.n_layer)]
        reference = ReferenceLlama(tiny_llama4, model.river_path)
        no_tail = ReferenceLlama(tiny_llama4, model.river_path)
        for token in tokens:
            reference.step(token, 1, tail_layers=1)
            no_tail.step(token, 1)
    for il, k in enumerate(cache):
        assert relative_row_error(k, reference.keys[il]).max() < 0.04, f"K of layer {il}"
    # the last layer's K came from the backbone, not the river
    assert relative_row_error(cache[3], no_tail.keys[3]).mean() > 0.05
