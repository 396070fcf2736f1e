"""Our own products' packing at load (OwnMatrices::pack) on several threads: each matrix
is cut into pieces of row groups that the threads take in turn, and the packed bytes are
those of packing on one thread, so products and a model's logits are the same bits."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from river_cpp.engine import _core
from river_cpp.engine.probes import own_products as op

FASTEST = _core.own_kernels()[0]
# pieces of 32 row groups (own_mul_mat.cpp): two whole pieces and a third of 5 groups and a part one
PIECE_ROWS = 32 * 8
N_OUT, N_IN = 2 * PIECE_ROWS + 5 * 8 + 3, 512
GGUF_TYPES = {name: getattr(gguf.GGMLQuantizationType, name.upper()) for name in op.COVERED}


@pytest.mark.parametrize("type_name", op.COVERED)
def test_a_matrix_of_several_pieces_packs_alike_on_any_thread_count(type_name):
    values = np.random.default_rng(0).standard_normal((N_OUT, N_IN), dtype=np.float32)
    data = _core.quantize_rows(type_name, values)
    x = np.random.default_rng(1).standard_normal((5, N_IN), dtype=np.float32)
    products = [_core.row_products(type_name, data, N_OUT, N_IN, x, n_threads=n, own=FASTEST) for n in (1, 2, 3)]
    one = products[0]
    assert all(np.array_equal(one, other) for other in products[1:])
    # and every piece in its place: the product of the matrix (8-bit columns: a small error)
    weights = gguf.quants.dequantize(data.reshape(N_OUT, -1), GGUF_TYPES[type_name]).reshape(N_OUT, N_IN)
    exact = x.astype(np.float64) @ weights.T.astype(np.float64)
    assert np.abs(one - exact).max() / np.abs(exact).max() < 0.02


@pytest.mark.real_model
def test_a_models_logits_do_not_depend_on_the_packing_threads(demo_model: Path):
    """The demo model's Q8_0 head (tied to the embeddings: 49152 rows, 192 pieces), packed on
    1 and on 3 threads, then computed on 1: the same logits, bit for bit."""
    ids = [1, 504, 3458, 314, 253, 1345]

    def logits(pack_threads: int) -> np.ndarray:
        engine = _core.Engine(str(demo_model), 64, 64, pack_threads, own_types=["q8_0"], own_kernels=FASTEST)
        n_layer = engine.n_layer
        engine.place(["CPU"] * n_layer, [], "CPU", "CPU", "CPU")
        assert engine.own_products == {"q8_0": 1}
        engine.n_threads = 1
        return engine.forward(ids, False)

    assert np.array_equal(logits(1), logits(3))
