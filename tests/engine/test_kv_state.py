"""Engine.save_kv / load_kv: the cache's first positions as bytes and back (what a prompt
cache keeps). A restored prefix continues exactly as the uninterrupted sequence, in
this model or a fresh one; bytes of another size are refused."""

from __future__ import annotations

import numpy as np
import pytest

from river_cpp import RiverError, RiverModel

IDS = [1, 17, 29, 4, 88, 123, 7, 56, 301, 12, 9, 44]


def test_a_restored_prefix_continues_as_the_uninterrupted_sequence(tiny_llama):
    with RiverModel(tiny_llama, river=None, n_ctx=64, n_threads=1) as model:
        whole = model.forward(IDS)
        state = model.engine.save_kv(8)
        layers = [model.engine.read_kv(il, 0, 8) for il in range(model.n_layer)]
        header = len(model.engine.save_kv(0))  # the cache's types
        assert len(state) - header == 2 * 2 * model.n_layer * 8 * model.engine.n_embd_kv  # F16 K and V
        model.reset()
        model.forward([5, 6, 7])  # other work in between
        model.engine.load_kv(8, state)
        assert model.engine.n_past == 8
        for il, (k, v) in enumerate(layers):
            restored = model.engine.read_kv(il, 0, 8)
            np.testing.assert_array_equal(restored[0], k)
            np.testing.assert_array_equal(restored[1], v)
        model.engine.rewind(8)  # the Python side's ids: rewound and refilled below
        with RiverModel(tiny_llama, river=None, n_ctx=64, n_threads=1) as fresh:
            fresh.engine.load_kv(8, state)
            rest = fresh.engine.forward(np.array(IDS[8:], dtype=np.int32), False, None)
        np.testing.assert_array_equal(rest, whole[8:])


def test_wrong_sizes_are_refused(tiny_llama):
    with RiverModel(tiny_llama, river=None, n_ctx=64, n_threads=1) as model:
        model.forward(IDS)
        state = model.engine.save_kv(4)
        with pytest.raises(RiverError, match="not the state of 5 positions"):
            model.engine.load_kv(5, state)
        with pytest.raises(RiverError, match="not the state"):
            model.engine.load_kv(4, state[:-1])
        with pytest.raises(RiverError, match="cannot save 13"):
            model.engine.save_kv(13)
        with pytest.raises(RiverError):
            model.engine.load_kv(65, b"")
