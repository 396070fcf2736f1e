"""Our own attention (csrc/own_attention.*): each row and head in one order of its own, so
a position's logits are the same bits however its prompt is cut, whether it runs as a
prompt row, a verify's exact row or a step, beside other sequences or alone, on any
thread count; within rounding of ggml's attention; and the op itself against a float64
softmax attention."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import llama_cpp
import numpy as np
import pytest

from river_cpp.engine import _core
from river_cpp.engine.compute.placement import describe_attention
from river_cpp.engine.probes.own_products import own_products

N_CTX = 512
N_TOKENS = 64
CHUNKS = (1, 2, 3, 7, 16)
PROMPT = "The river flows past the old mill, and the miller counts the sacks of grain:"


def make_engine(path: Path, *, n_threads: int = 2, own_attention: bool = True, **options) -> _core.Engine:
    """An engine as the graph backbone makes it: our own products where they passed their probe."""
    return _core.Engine(
        str(path), N_CTX, 512, n_threads, own_attention=own_attention, **own_products().engine_arguments(), **options
    )


def prompt_ids(n: int = N_TOKENS, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, 5000, n).astype(np.int32)


def logits_in_pieces(engine: _core.Engine, ids: np.ndarray, sizes: Iterable[int], *, prompt: bool) -> np.ndarray:
    """Every position's logits, `ids` fed from an empty sequence in pieces of `sizes`
    (cycled), each a forward of its own."""
    engine.reset()
    out, start, sizes = [], 0, list(sizes)
    while start < len(ids):
        n = sizes[len(out) % len(sizes)]
        out.append(engine.forward(ids[start : start + n], False, None, prompt))
        start += n
    return np.concatenate(out)


def differing_positions(a: np.ndarray, b: np.ndarray) -> list[int]:
    """The positions whose float32 logits differ in any bit."""
    assert a.shape == b.shape
    return [i for i in range(len(a)) if not np.array_equal(a[i].view(np.uint32), b[i].view(np.uint32))]


def assert_cuts_alike(engine: _core.Engine, ids: np.ndarray, *, prompt_rows: bool = True) -> None:
    """The whole input as one forward, in pieces of each of CHUNKS (and all of them in
    turn), as prompts (prompt_rows) and as exact rows, and one step at a time: the same bits."""
    whole = logits_in_pieces(engine, ids, [len(ids)], prompt=prompt_rows)
    ways = {"steps": ([1], False)}
    for size in CHUNKS:
        ways[f"exact rows by {size}"] = ([size], False)
        if prompt_rows:
            ways[f"prompt by {size}"] = ([size], True)
    ways["prompt by 1, 2, 3, 7, 16"] = (list(CHUNKS), prompt_rows)
    for name, (sizes, prompt) in ways.items():
        got = logits_in_pieces(engine, ids, sizes, prompt=prompt)
        assert differing_positions(whole, got) == [], name


# ---------------------------------------------------------------- the op alone


def reference_attention(q, k, v, mask, kq_scale) -> np.ndarray:
    """softmax(kq_scale q.k + mask) v in float64; q [t, h, d], k [hk, n, d], v [hk, d, n]."""
    n_tokens, n_head, head = q.shape
    group = n_head // k.shape[0]
    out = np.zeros((n_tokens, n_head, head))
    for h in range(n_head):
        kh, vh = k[h // group].astype(np.float64), v[h // group].astype(np.float64)
        for t in range(n_tokens):
            seen = mask[t] == 0
            s = kq_scale * (kh[seen] @ q[t, h].astype(np.float64))
            p = np.exp(s - s.max())
            out[t, h] = vh[:, seen] @ p / p.sum()
    return out.reshape(n_tokens, n_head * head)


def random_attention(n_tokens=5, n_head=6, n_head_kv=2, n_kv=100, head=24, seed=0):
    """q, k, v and a causal mask with holes; k and v are NaN in the masked cells past the
    last position (the unused cells of a cache), which the op must never read."""
    rng = np.random.default_rng(seed)
    q = rng.normal(0, 1, (n_tokens, n_head, head)).astype(np.float32)
    k = rng.normal(0, 1, (n_head_kv, n_kv, head)).astype(np.float16)
    v = rng.normal(0, 1, (n_head_kv, head, n_kv)).astype(np.float16)
    n_past = n_kv - 40
    mask = np.full((n_tokens, n_kv), -np.inf, dtype=np.float32)
    for t in range(n_tokens):
        mask[t, : n_past + t + 1] = 0.0
        mask[t, rng.integers(0, n_past, 7)] = -np.inf  # holes: a sliding window's, say
    k[:, n_past + n_tokens :] = np.nan
    v[:, :, n_past + n_tokens :] = np.nan
    return q, k, v, mask


def own(q, k, v, mask, kq_scale, n_threads=1, kernels="auto", types=("f16", "f16")) -> np.ndarray:
    """Our op over k [hk, n, d] and v [hk, d, n]: F16 arrays, or the raw q8_0 rows of
    `types`' quantized ones (cached: see in_cache)."""
    k, v = (x.view(np.uint16) if x.dtype == np.float16 else x for x in (k, v))
    return _core.attention_rows(q, k, v, mask, kq_scale, n_threads, kernels, *types)


Q8_0_BLOCK = 34  # ggml's block_q8_0: an F16 scale, then 32 int8 values
NAN_F16 = np.array([np.nan], np.float16).view(np.uint8)


def q8_0_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """values [..., head] float32 quantized by ggml to q8_0: (the raw rows [..., row
    bytes], their values as d * q, float32)."""
    raw = _core.quantize_rows("q8_0", values.reshape(-1, values.shape[-1]).astype(np.float32))
    blocks = raw.reshape(-1, Q8_0_BLOCK)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    return raw.reshape(*values.shape[:-1], -1), (d * blocks[:, 2:].view(np.int8)).reshape(values.shape)


def in_cache(k, v, types):
    """k [hk, n, d] and v [hk, d, n] (F16, NaN in the unused cells) as a cache of `types`
    holds them (q8_0: rows of blocks, V by rows; the scales of unused cells NaN), and the
    values the op reads from each (float32, the F16 arrays' layout)."""
    out = []
    for x, type_, by_rows in ((k, types[0], k), (v, types[1], v.transpose(0, 2, 1))):
        if type_ == "f16":
            out.append((x, x.astype(np.float32)))
            continue
        unused = np.isnan(by_rows).any(axis=2)
        raw, values = q8_0_rows(np.nan_to_num(by_rows.astype(np.float32)))
        raw = raw.copy()
        for block in range(raw.shape[-1] // Q8_0_BLOCK):
            raw[..., block * Q8_0_BLOCK : block * Q8_0_BLOCK + 2][unused] = NAN_F16
        out.append((raw, values if x is k else values.transpose(0, 2, 1)))
    (k_raw, k_values), (v_raw, v_values) = out
    return k_raw, v_raw, k_values, v_values


# (type_k, type_v): the F16 cache and q8_0 for either or both
CACHE_TYPES = [("f16", "f16"), ("q8_0", "q8_0"), ("q8_0", "f16"), ("f16", "q8_0")]


@pytest.mark.parametrize("types", CACHE_TYPES)
def test_the_op_matches_a_float64_attention(types):
    """Over the values the cache holds (q8_0: its blocks' d * q), whose unused cells are
    never read (NaN there, in F16 values or q8_0 scales)."""
    q, k, v, mask = random_attention(head=24 if types == ("f16", "f16") else 32)
    k_raw, v_raw, k_values, v_values = in_cache(k, v, types)
    got = own(q, k_raw, v_raw, mask, 0.3, types=types)
    assert np.isfinite(got).all()
    want = reference_attention(q, np.nan_to_num(k_values), np.nan_to_num(v_values), mask, 0.3)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("types", CACHE_TYPES)
def test_the_op_gives_a_row_the_same_bits_alone_and_on_any_thread_count(types):
    """37 rows: blocks of rows that share their tiles' conversion, the last one part full;
    a row alone on 5 threads: its heads in parts."""
    q, k, v, mask = random_attention(n_tokens=37, head=32)
    k, v, _, _ = in_cache(k, v, types)
    batch = own(q, k, v, mask, 0.125, n_threads=1, types=types)
    for n_threads in (2, 3, 5):
        got = own(q, k, v, mask, 0.125, n_threads, types=types)
        assert np.array_equal(got.view(np.uint32), batch.view(np.uint32))
    for t in (0, 3, 17, 36):
        for n_threads in (1, 5):
            alone = own(q[t : t + 1], k, v, mask[t : t + 1], 0.125, n_threads, types=types)
            assert np.array_equal(alone.view(np.uint32), batch[t : t + 1].view(np.uint32))


@pytest.mark.parametrize(
    "head, n_kv, types",
    [(8, 50, CACHE_TYPES[0]), (24, 100, CACHE_TYPES[0]), (64, 96, CACHE_TYPES[0]), (256, 75, CACHE_TYPES[0])]
    + [(head, n_kv, types) for types in CACHE_TYPES[1:] for head, n_kv in ((32, 50), (64, 96), (256, 75))],
)
def test_every_row_kernel_gives_the_baseline_bits(head, n_kv, types):
    """The AVX2 kernel (where this CPU runs it) computes the baseline's operations: whole
    tiles, part tiles and tiles with holes alike, over an F16 or a q8_0 cache (the AVX2
    kernel's own q8_0 tile reader against the baseline's)."""
    kernels = _core.own_attention_kernels()
    assert kernels[0] == "baseline"
    if len(kernels) == 1:
        pytest.skip("this CPU runs only the baseline kernel")
    q, k, v, mask = random_attention(head=head, n_kv=n_kv, seed=head)
    k, v, _, _ = in_cache(k, v, types)
    baseline = own(q, k, v, mask, 0.2, kernels="baseline", types=types)
    for name in kernels[1:]:
        got = own(q, k, v, mask, 0.2, kernels=name, types=types)
        assert np.array_equal(got.view(np.uint32), baseline.view(np.uint32)), name


def test_the_op_skips_masked_keys_past_the_padding():
    """More masked cells at the end (a larger n_kv padding) change no bit."""
    q, k, v, mask = random_attention(n_kv=70)
    wide_k = np.concatenate([k, np.full((k.shape[0], 90, k.shape[2]), np.nan, np.float16)], axis=1)
    wide_v = np.concatenate([v, np.full((*v.shape[:2], 90), np.nan, np.float16)], axis=2)
    wide_mask = np.concatenate([mask, np.full((mask.shape[0], 90), -np.inf, np.float32)], axis=1)
    assert np.array_equal(own(q, wide_k, wide_v, wide_mask, 0.5), own(q, k, v, mask, 0.5))


def test_the_op_refuses_shapes_it_does_not_take():
    q, k, v, mask = random_attention()
    with pytest.raises(ValueError, match="multiple of 8"):
        own(q[:, :, :20], k[:, :, :20], v[:, :20], mask, 1.0)
    with pytest.raises(ValueError, match="do not fit"):
        own(q, k, v, mask[:, :-1], 1.0)
    with pytest.raises(ValueError, match="no kernels 'sse9'"):
        own(q, k, v, mask, 1.0, kernels="sse9")
    with pytest.raises(ValueError, match="do not tile this model's heads of 24"):
        own(q, k, v, mask, 1.0, types=("q8_0", "f16"))
    with pytest.raises(ValueError, match="f16 or q8_0, not 'q4_k'"):
        own(q, k, v, mask, 1.0, types=("f16", "q4_k"))
    q, k, v, mask = random_attention(head=32)
    k_raw, v_raw, _, _ = in_cache(k, v, ("q8_0", "q8_0"))
    with pytest.raises(ValueError, match="do not fit"):
        own(q, k_raw[:, :, :-1], v_raw, mask, 1.0, types=("q8_0", "q8_0"))


# ---------------------------------------------------------------- in the engine


@pytest.mark.real_model
def test_every_cut_of_a_prompt_gives_the_same_bits(demo_model):
    """The demo model (9 query heads over 3 KV heads): a prompt whole, in pieces, as
    exact rows and as steps, every position the same bits."""
    assert_cuts_alike(make_engine(demo_model), prompt_ids())


def test_prompt_rows_equal_steps_in_chunks_of_every_size(q8_llama):
    """A tiny Q8_0 llama (our own products, 8 query heads over one KV head): 64 tokens as
    a prompt whole, in chunks of every size from 1 to 64, and one step at a time, every
    position the same bits."""
    engine = make_engine(q8_llama)
    ids = prompt_ids()
    steps = logits_in_pieces(engine, ids, [1], prompt=False)
    for size in range(1, N_TOKENS + 1):
        assert differing_positions(logits_in_pieces(engine, ids, [size], prompt=True), steps) == [], size


@pytest.mark.real_model
def test_ggml_attention_differs_by_cut(demo_model):
    """The check above can fail: with ggml's attention a prompt's rows differ from steps."""
    engine = make_engine(demo_model, own_attention=False)
    ids = prompt_ids()
    whole = logits_in_pieces(engine, ids, [len(ids)], prompt=True)
    assert differing_positions(whole, logits_in_pieces(engine, ids, [1], prompt=False)) != []


@pytest.mark.real_model
def test_thread_count_changes_no_bit(demo_model):
    ids = prompt_ids()
    one, two = (logits_in_pieces(make_engine(demo_model, n_threads=n), ids, [40, 1], prompt=True) for n in (1, 2))
    assert differing_positions(one, two) == []


@pytest.mark.real_model
def test_sequences_sharing_a_batch_equal_each_alone(demo_model):
    engine = make_engine(demo_model, n_seq=2)
    a, b = prompt_ids(30, seed=1), prompt_ids(20, seed=2)
    together = engine.forward_many([(0, a[:25], False, True), (1, b[:13], False, True)])
    together += engine.forward_many([(1, b[13:], False, False), (0, a[25:], False, False)])
    alone = make_engine(demo_model)
    assert differing_positions(np.concatenate([together[0], together[3]]), alone.forward(a, False, None, True)) == []
    alone.reset()
    assert differing_positions(np.concatenate([together[1], together[2]]), alone.forward(b, False, None, True)) == []


def test_sliding_window_rows_cut_alike(tiny_gemma3):
    """tiny gemma3: a 4-token sliding window on half its layers, F32 matrices (exact rows
    only: ggml's prompt products by float matrices depend on the batch)."""
    assert_cuts_alike(make_engine(tiny_gemma3, exact="bitwise"), prompt_ids(40), prompt_rows=False)


@pytest.mark.real_model
@pytest.mark.slow
def test_gemma3_270m_rows_cut_alike(gemma270_backbone):
    """Gemma 3 270M: 4 query heads per KV head, heads of 256, F16 matrices (exact rows)."""
    assert_cuts_alike(make_engine(gemma270_backbone, exact="bitwise"), prompt_ids(), prompt_rows=False)


@pytest.mark.real_model
def test_agrees_with_ggml_attention(demo_backbone):
    """The F16 demo model (on the Q4_1 release, ggml's prompt rows and steps already
    differ by ~3% of the logits' range, so that ours is as far from either): a prompt's
    logits within 0.5% of the range, and 32 greedy tokens alike."""
    ids = np.array(llama_cpp.Llama(str(demo_backbone), vocab_only=True, verbose=False).tokenize(PROMPT.encode()))
    engines = [make_engine(demo_backbone, own_attention=own) for own in (True, False)]
    ours, theirs = (engine.forward(ids.astype(np.int32), False, None, True) for engine in engines)
    assert np.abs(ours - theirs).max() < 0.005 * np.abs(theirs).max()
    assert (ours.argmax(-1) == theirs.argmax(-1)).all()
    greedy = []
    for engine, logits in zip(engines, (ours, theirs)):
        tokens = [int(logits[-1].argmax())]
        for _ in range(31):
            tokens.append(int(engine.forward(np.array(tokens[-1:], np.int32), True)[-1].argmax()))
        greedy.append(tokens)
    assert greedy[0] == greedy[1]


@pytest.mark.parametrize("own_attention", [None, True, False])
def test_the_model_takes_the_attention_it_is_given(tiny_llama, own_attention):
    """RiverModel(own_attention=...) reaches the engine, ours by default: its prompt
    logits are our attention's bits with it, and not without; `attention` says which."""
    from river_cpp import RiverModel

    ids = prompt_ids(24)
    ours = make_engine(tiny_llama).forward(ids, False, None, True)
    options = {} if own_attention is None else {"own_attention": own_attention}
    with RiverModel(tiny_llama, river=None, n_ctx=N_CTX, n_threads=2, **options) as model:
        got = np.asarray(model.forward(ids))
        described = model.attention
    takes_ours = own_attention is not False
    assert (differing_positions(got, ours) == []) == takes_ours
    if takes_ours:
        assert described.startswith("river-cpp's own in every layer")
    else:
        assert described == "ggml's in every layer (own_attention is off)"


def test_a_layer_or_cache_on_a_device_keeps_ggml_attention(tiny_llama):
    """The plan per layer: ours on the CPU over a host cache; ggml's, with why, for a
    layer on a device or a cache there (names only: nothing is placed)."""
    engine = make_engine(tiny_llama)
    host = dict(backbone_layers=["CPU", "CPU"], river_layers=[], backbone_head="CPU", river_head="CPU")
    assert engine.attention_plan(**host, kv_cache="CPU") == {"backbone_layers": ["", ""], "river_layers": []}
    assert engine.attention_plan(**host, kv_cache="Vulkan0")["backbone_layers"] == [
        "the KV cache is on Vulkan0",
        "the KV cache is on Vulkan0",
    ]
    split = dict(host, backbone_layers=["RPC0[127.0.0.1:50052]", "CPU"])
    assert engine.attention_plan(**split, kv_cache="CPU")["backbone_layers"] == [
        "the layer computes on RPC0[127.0.0.1:50052]",
        "",
    ]
    assert describe_attention(engine.attention_plan(**split, kv_cache="CPU")) == (
        "backbone layers 0 ggml's (the layer computes on RPC0[127.0.0.1:50052]), 1 river-cpp's own"
    )
    with pytest.raises(_core.RiverError, match="a device for each of the 2 layers"):
        engine.attention_plan(**dict(host, backbone_layers=["CPU"]), kv_cache="CPU")
    assert engine.attention == {"backbone_layers": [], "river_layers": []}  # not placed yet
    engine.forward(prompt_ids(3), True)  # places everything on the host
    assert engine.attention == {"backbone_layers": ["", ""], "river_layers": []}


def test_a_head_size_our_op_does_not_read_keeps_ggml_attention(make_tiny_gguf):
    """Heads of 12 (not a multiple of 8): ggml's attention, which says so; the model runs."""
    path = make_tiny_gguf("tiny_llama_head12", n_layer=1, n_embd=48, n_head=4, n_head_kv=2, seed=7)
    engine = make_engine(path)
    engine.forward(prompt_ids(5), True)
    reason = "our attention does not read a cache of f16 K, f16 V with heads of 12"
    assert engine.attention["backbone_layers"] == [reason]
