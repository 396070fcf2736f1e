"""Our own quantized products (csrc/own_*, river_cpp.engine.probes.own_products): every kernel
gives the scalar reference's bits, a column's result does not depend on the batch or the
thread count, the result is the product, a model's matrices take them, and a probe that
fails leaves ggml's kernels in place."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from river_cpp.engine import _core
from river_cpp.engine.probes import own_products as op
from river_cpp.engine.probes.extra_bufts import Verdict, judge

# numpy's dequantization of each covered type (the GGUF definition, independent of ggml's C)
GGUF_TYPES = {
    "q4_0": gguf.GGMLQuantizationType.Q4_0,
    "q8_0": gguf.GGMLQuantizationType.Q8_0,
    "q4_K": gguf.GGMLQuantizationType.Q4_K,
    "q5_K": gguf.GGMLQuantizationType.Q5_K,
    "q6_K": gguf.GGMLQuantizationType.Q6_K,
    "q4_1": gguf.GGMLQuantizationType.Q4_1,
    "q5_0": gguf.GGMLQuantizationType.Q5_0,
    "q5_1": gguf.GGMLQuantizationType.Q5_1,
    "iq4_nl": gguf.GGMLQuantizationType.IQ4_NL,
    "q3_K": gguf.GGMLQuantizationType.Q3_K,
    "q2_K": gguf.GGMLQuantizationType.Q2_K,
    "iq4_xs": gguf.GGMLQuantizationType.IQ4_XS,
}
BLOCK = op.BLOCK_VALUES
KERNELS = _core.own_kernels()
FASTEST = KERNELS[0]


def matrix(type_name: str, n_out: int, n_in: int, seed: int = 0) -> np.ndarray:
    """Random weights quantized by ggml: the raw rows."""
    values = np.random.default_rng(seed).standard_normal((n_out, n_in), dtype=np.float32)
    return _core.quantize_rows(type_name, values)


def columns(n: int, n_in: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, n_in), dtype=np.float32)


def own(type_name, data, n_out, n_in, x, kernels=FASTEST, n_threads=2) -> np.ndarray:
    return _core.row_products(type_name, data, n_out, n_in, x, n_threads=n_threads, own=kernels)


def test_the_reference_is_always_offered_last():
    assert KERNELS[-1] == "reference"
    assert len(set(KERNELS)) == len(KERNELS)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("type_name", list(GGUF_TYPES))
@pytest.mark.parametrize("n_out", [8, 21, 3])
def test_every_kernel_gives_the_references_bits(type_name, kernels, n_out):
    # odd shapes: a part row group (21, 3 rows), 3 blocks per row, 1..7 columns (tiles and tails)
    n_in = 3 * BLOCK[type_name]
    data = matrix(type_name, n_out, n_in)
    x = columns(7, n_in)
    for n in (1, 2, 5, 7):
        assert np.array_equal(
            own(type_name, data, n_out, n_in, x[:n], kernels), own(type_name, data, n_out, n_in, x[:n], "reference")
        )


@pytest.mark.parametrize("type_name", list(GGUF_TYPES))
def test_a_column_gets_the_same_bits_in_any_batch(type_name):
    n_out, n_in = 21, 2 * BLOCK[type_name]
    data = matrix(type_name, n_out, n_in)
    x = columns(512, n_in)
    alone = np.stack([own(type_name, data, n_out, n_in, x[i : i + 1])[0] for i in range(33)])
    for n in range(1, 34):
        assert np.array_equal(own(type_name, data, n_out, n_in, x[:n]), alone[:n]), f"{n} columns"
    prompt = own(type_name, data, n_out, n_in, x)
    assert np.array_equal(prompt[:33], alone)
    assert np.array_equal(prompt[-1], own(type_name, data, n_out, n_in, x[-1:])[0])


def test_the_thread_count_changes_no_bit():
    data = matrix("q4_K", 40, 512)
    x = columns(9, 512)
    one = own("q4_K", data, 40, 512, x, n_threads=1)
    assert np.array_equal(one, own("q4_K", data, 40, 512, x, n_threads=3))


@pytest.mark.parametrize("type_name", list(GGUF_TYPES))
def test_the_product_is_the_matrix_product(type_name):
    n_out, n_in = 21, 2 * BLOCK[type_name]
    data = matrix(type_name, n_out, n_in)
    weights = gguf.quants.dequantize(data.reshape(n_out, -1), GGUF_TYPES[type_name]).reshape(n_out, n_in)
    x = columns(9, n_in)
    exact = x.astype(np.float64) @ weights.T.astype(np.float64)
    got = own(type_name, data, n_out, n_in, x)
    ggml = _core.row_products(type_name, data, n_out, n_in, x, n_threads=2)
    # both quantize the columns to 8 bits: the same size of error against the float product
    scale = np.abs(exact).max()
    assert np.abs(got - exact).max() / scale < 0.02
    assert np.abs(got - exact).max() <= 2 * np.abs(ggml - exact).max() + 1e-6 * scale


def test_an_uncovered_type_or_unknown_kernels_are_refused():
    # TQ2_0: ternary weights, which our products do not multiply
    with pytest.raises(Exception, match="do not cover"):
        _core.row_products("tq2_0", matrix("tq2_0", 8, 256), 8, 256, columns(1, 256), own="reference")
    with pytest.raises(Exception, match="no own kernels 'sse9'"):
        own("q4_0", matrix("q4_0", 8, 64), 8, 64, columns(1, 64), kernels="sse9")


# ---------------------------------------------------------------- the probe


def test_the_probe_childs_report_passes_the_judge(monkeypatch):
    report = op.run_child("reference")
    import json

    verdict = judge(0, json.dumps(report), "")
    assert verdict.usable, verdict.reason
    assert verdict.reason == "ok: " + ", ".join(op.COVERED)


def test_a_failed_probe_keeps_ggmls_kernels(monkeypatch):
    seen = {}

    def failing(names, key, **options):
        seen.update(key=key, folder=options["folder"])
        return {name: Verdict(False, "crashed (SIGILL)") for name in names}

    monkeypatch.setattr(op, "cached_probe", failing)
    products = op.own_products("auto")
    assert products.types == () and products.kernels == ""
    assert "crashed (SIGILL)" in products.reason
    assert seen["folder"] == op.CACHE_FOLDER and seen["key"]["kernels"] == FASTEST
    assert seen["key"]["types"] == ",".join(op.COVERED)  # a verdict on fewer types is not reused


def test_a_passed_probe_gives_every_covered_type(monkeypatch):
    monkeypatch.setattr(op, "cached_probe", lambda names, key, **_: {n: Verdict(True, "ok") for n in names})
    products = op.own_products("auto")
    assert products.types == op.COVERED and products.kernels == FASTEST


def test_the_environment_chooses(monkeypatch):
    monkeypatch.setenv(op.ENV, "none")
    assert op.own_products().types == ()
    monkeypatch.setenv(op.ENV, "reference")
    assert op.own_products().kernels == "reference"
    monkeypatch.setenv(op.ENV, "sse9")
    with pytest.raises(ValueError, match="RIVER_CPP_OWN_PRODUCTS"):
        op.own_products()


# ---------------------------------------------------------------- in a model


@pytest.mark.real_model
def test_a_releases_verify_rows_equal_plain_steps_with_ggmls_exact_op_off(qwen05_release):
    """With our products on every covered matrix, a k-row forward's rows equal one-token
    steps bit for bit; exact="on" covers the rest (the F16 cache, Q5_0/Q8_0 where ggml's
    rows differ), and no product takes the per-column path for a covered type."""
    engine = _core.Engine(str(qwen05_release), 512, 512, 2, own_types=list(op.COVERED), own_kernels=FASTEST)
    ids = list(range(1000, 1040))
    engine.forward(ids[:30], True)  # places the model on the CPU: the matrices are packed
    assert engine.own_kernels == FASTEST
    assert sum(engine.own_products.values()) > 0
    steps = [engine.forward([t], True)[0] for t in ids[30:39]]
    engine.rewind(30)
    verify = engine.forward(ids[30:39], False)
    assert np.array_equal(verify, np.stack(steps))


@pytest.mark.parametrize("type_name", ["q3_K", "q2_K", "iq4_xs"])
def test_a_models_verify_rows_equal_plain_steps_on_the_few_bit_types(make_tiny_gguf, type_name):
    """A tiny model whose every matrix is Q3_K, Q2_K or IQ4_XS (rows of 256 and 512, the
    tied embedding as the head): all of them take our products, and a k-row forward's
    rows equal one-token steps bit for bit."""
    path = make_tiny_gguf(f"tiny_{type_name}", dtype=type_name, n_embd=256, n_ff=512, seed=4)
    engine = _core.Engine(str(path), 512, 512, 2, own_types=list(op.COVERED), own_kernels=FASTEST)
    ids = list(range(1000, 1040))
    engine.forward(ids[:30], True)
    # 2 layers of 7 matrices and the head
    assert engine.own_products == {type_name: 15}
    steps = [engine.forward([t], True)[0] for t in ids[30:39]]
    engine.rewind(30)
    verify = engine.forward(ids[30:39], False)
    assert np.array_equal(verify, np.stack(steps))


@pytest.mark.real_model
def test_a_release_leaves_no_matrix_of_a_covered_type_to_ggml(qwen05_release):
    """Every matrix of a covered type in the release is packed for our products, its
    Q5_0 matrices (rows of 896 values: no whole K-quant block) among them, as
    model_products reads from the header."""
    from river_cpp.engine.files.gguf_info import GgufInfo

    engine = _core.Engine(str(qwen05_release), 256, 256, 2, own_types=list(op.COVERED), own_kernels=FASTEST)
    engine.forward([1000, 1001], True)  # places the model on the CPU: the matrices are packed
    info = GgufInfo.read(qwen05_release)
    tied = info.tensor("output.weight") is None  # the token embedding is then the LM head
    expected: dict[str, int] = {}
    for tensor in info.tensors:
        multiplied = tensor.name.endswith(".weight") and len(tensor.shape) == 2
        if multiplied and tensor.type in op.COVERED and (tied or tensor.name != "token_embd.weight"):
            expected[tensor.type] = expected.get(tensor.type, 0) + 1
    assert expected.get("q5_0", 0) > 0, "the release has no Q5_0 matrix: the test would prove nothing"
    assert engine.own_products == expected
    read = op.model_products(qwen05_release, op.OwnProducts("auto", FASTEST, op.COVERED, "test"))
    assert {t: p["matrices"] for t, p in read.items() if p["product"] != "ggml"} == expected


@pytest.mark.real_model
def test_a_model_without_own_types_packs_nothing(qwen05_release):
    engine = _core.Engine(str(qwen05_release), 256, 256, 2)
    engine.forward([1000, 1001], True)
    assert engine.own_products == {} and engine.own_kernels == ""


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_column_gives_non_finite_outputs(bad):
    """A NaN or infinity in a column (a poisoned weight upstream) must not be quantized
    into a finite column: the engine names the weights by their non-finite logits."""
    x = columns(2, 512)
    x[1, 300] = bad
    out = own("q4_K", matrix("q4_K", 8, 512), 8, 512, x)
    assert np.isfinite(out[0]).all() and not np.isfinite(out[1]).any()
