"""Exact rows (csrc/exact_ops.*, ExactMode): a token's logits as row i of a k-row
forward equal the same token's one-token step bit for bit, product by product and
through whole forwards; the measure module and its command line report it."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from river_cpp.engine import _core
from river_cpp.measure.check_exact import forward_check, op_table, threads_check

MAX_K = 9
QUANTIZED = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}


def matrix(type_name: str, n_out: int, n_in: int, seed: int = 0) -> np.ndarray:
    """A random matrix's raw rows in `type_name`."""
    values = np.random.default_rng(seed).standard_normal((n_out, n_in), dtype=np.float32)
    if type_name == "f16":
        return values.astype(np.float16).view(np.uint8).ravel()
    return np.ascontiguousarray(gguf.quants.quantize(values, QUANTIZED[type_name])).view(np.uint8).ravel()


def rows_alone_and_batched(type_name: str, *, exact: bool, n_threads: int = 2):
    """(each column alone, all MAX_K columns at once) of one product."""
    n_out, n_in = 96, 256
    data = matrix(type_name, n_out, n_in)
    x = np.random.default_rng(1).standard_normal((MAX_K, n_in), dtype=np.float32)

    def product(columns: np.ndarray) -> np.ndarray:
        return _core.row_products(type_name, data, n_out, n_in, columns, "", exact, n_threads)

    alone = np.stack([product(x[i : i + 1])[0] for i in range(MAX_K)])
    return alone, product(x)


@pytest.mark.parametrize("type_name", ["f16", "q8_0", "q4_0"])
def test_exact_product_rows_do_not_depend_on_the_batch(type_name):
    alone, batched = rows_alone_and_batched(type_name, exact=True)
    assert np.array_equal(alone, batched)
    # and it is the product: close to ggml's own
    _, ggml = rows_alone_and_batched(type_name, exact=False)
    np.testing.assert_allclose(batched, ggml, rtol=1e-3, atol=1e-3)


def test_exact_product_does_not_depend_on_the_thread_count():
    one = rows_alone_and_batched("q4_0", exact=True, n_threads=1)[1]
    three = rows_alone_and_batched("q4_0", exact=True, n_threads=3)[1]
    assert np.array_equal(one, three)


def test_row_products_refuses_a_wrong_size():
    with pytest.raises(ValueError, match="not n_out rows"):
        _core.row_products("q8_0", np.zeros(10, np.uint8), 4, 32, np.zeros((1, 32), np.float32))


# ---------------------------------------------------------------- whole forwards


@pytest.fixture(scope="module")
def tiny_files(make_tiny_gguf) -> dict[str, Path]:
    return {dtype: make_tiny_gguf(f"exact_{dtype}", dtype=dtype, seed=4) for dtype in ("f16", "q8_0", "q4_0")}


def verify_against_steps(path: Path, exact: str, *, depth: int = 20, k: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """(logits of k plain steps after `depth` tokens, logits of the same k tokens as one forward)."""
    engine = _core.Engine(str(path), n_ctx=256, n_batch=64, n_threads=2, exact=exact)
    ids = list(range(5, 5 + depth + k))
    engine.forward(ids[:depth], True)
    steps = np.concatenate([engine.forward(ids[depth + i : depth + i + 1], True) for i in range(k)])
    engine.rewind(depth)
    return steps, engine.forward(ids[depth:], False)


@pytest.mark.parametrize(
    "dtype, exact",
    [("q8_0", "on"), ("q4_0", "on"), ("f16", "bitwise"), ("q8_0", "bitwise"), ("q4_0", "bitwise")],
)
def test_a_verify_row_is_the_plain_step(tiny_files, dtype, exact):
    """ "on" covers quantized matrices; "bitwise" float ones too (the F16 file)."""
    steps, verify = verify_against_steps(tiny_files[dtype], exact)
    assert np.array_equal(steps, verify)


def test_exact_off_keeps_ggml_kernels_close(tiny_files):
    steps, verify = verify_against_steps(tiny_files["f16"], "off")
    np.testing.assert_allclose(steps, verify, atol=0.1)  # logits of scale ~20


def test_longer_batches_than_exact_rows_are_prompts(tiny_files):
    """A batch past exact_rows (a prompt) computes the same values to rounding."""
    ids = list(range(5, 45))
    exact = _core.Engine(str(tiny_files["f16"]), n_ctx=256, n_batch=64, n_threads=2, exact="on", exact_rows=8)
    plain = _core.Engine(str(tiny_files["f16"]), n_ctx=256, n_batch=64, n_threads=2, exact="off")
    np.testing.assert_allclose(exact.forward(ids, False), plain.forward(ids, False), atol=0.1)


def test_a_prompt_takes_ggml_kernels_in_any_mode(tiny_files):
    """A prompt is prefilled alike by every decoding, so even a bitwise engine computes
    it with ggml's batched kernels, bit for bit as an engine with exact rows off does,
    while the same rows as a verify take the one-token arithmetic."""
    ids = list(range(5, 25))
    path = str(tiny_files["f16"])
    off = _core.Engine(path, n_ctx=256, n_batch=64, n_threads=2, exact="off").forward(ids, False)
    bitwise = _core.Engine(path, n_ctx=256, n_batch=64, n_threads=2, exact="bitwise")
    assert np.array_equal(bitwise.forward(ids, False, prompt=True), off)
    bitwise.reset()
    assert not np.array_equal(bitwise.forward(ids, False), off)


def test_unknown_exact_mode_is_refused(tiny_files):
    with pytest.raises(ValueError, match="exact must be"):
        _core.Engine(str(tiny_files["f16"]), n_ctx=64, n_batch=64, n_threads=1, exact="sometimes")


# ---------------------------------------------------------------- the measure module


@pytest.mark.parametrize("own_attention, attention_nodes", [(True, set()), (False, {"kq", "kq_soft_max", "kqv"})])
def test_forward_check_finds_identity_and_names_the_nodes(tiny_files, own_attention, attention_nodes):
    """Verify rows equal steps with our own attention (its batched op) and with ggml's
    (exact_mul_mat's products by the cache); the check names each one's nodes."""
    check = forward_check(
        tiny_files["q8_0"], depths=(30,), ks=(2, 5), n_threads=2, exact="on", own_attention=own_attention
    )
    assert check.rows == 2 + 5 and check.identical_rows == check.rows
    assert check.logits == {2: 0.0, 5: 0.0}
    nodes = {row.node for row in check.nodes}
    assert {"attn_norm", "wq", "kqv_out", "ffn_gate", "result_output"} | attention_nodes <= nodes
    assert not ({"kq", "kq_soft_max", "kqv"} - attention_nodes) & nodes  # ours is one op: kqv_out
    assert all(row.first == 0 for row in check.nodes)


def test_forward_check_points_at_the_first_differing_node(tiny_files):
    """Under ggml's kernels an F16 file's verify rows part from its steps at an op
    that depends on the batch (sgemm's F16 product), which the check names."""
    check = forward_check(tiny_files["f16"], depths=(30,), ks=(4,), n_threads=2, exact="off")
    if check.identical_rows == check.rows:
        pytest.skip("ggml's kernels on this host compute F16 batches as single rows")
    firsts = {row.node: row.first for row in check.nodes if row.first}
    assert sum(firsts.values()) == check.rows - check.identical_rows
    assert set(firsts) <= {"wq", "wk", "wv", "kq", "kqv", "attn_out", "ffn_gate", "ffn_up", "ffn_out", "result_output"}


def test_op_table_lists_each_type_and_kernel(tiny_files):
    rows = op_table(tiny_files["q4_0"], ks=(2, 3), n_threads=2, buffer_types=(), depths=(256,))
    kernels = {(row.type, row.kernel) for row in rows}
    assert ("q4_0", "exact_mul_mat") in kernels and ("f16", "exact_mul_mat") in kernels
    assert all(row.diffs == {2: 0.0, 3: 0.0} for row in rows if row.kernel == "exact_mul_mat")


def test_threads_check(tiny_files):
    assert threads_check(tiny_files["q8_0"], (1, 2), depth=20, k=3) == {1: 0.0, 2: 0.0}


def test_check_exact_command(tiny_files, capsys):
    from river_cpp.apps.cli import main

    assert (
        main(["check-exact", str(tiny_files["q4_0"]), "-t", "2", "--exact", "on", "--depths", "20", "--max-k", "3"])
        == 0
    )
    out = capsys.readouterr().out
    assert "exact=on" in out and "rows with bit-identical logits: 5 of 5" in out


# ---------------------------------------------------------------- RiverModel(exact=)


def test_river_model_takes_exact(tiny_files):
    from river_cpp import RiverModel

    prompt = "The quick brown fox"
    runs = {}
    for exact in (True, "bitwise", False):
        with RiverModel(tiny_files["f16"], n_ctx=128, n_threads=2, river=None, progress=False, exact=exact) as model:
            runs[exact] = model.generate(prompt, max_tokens=12, speculative=False).token_ids
    assert len(runs[True]) == 12 and runs["bitwise"] == runs[True]
    with pytest.raises(ValueError, match="exact must be"):
        RiverModel(tiny_files["f16"], n_ctx=128, n_threads=1, river=None, progress=False, exact="sometimes")
