"""Named configurations, and the river head of a type of its own (RiverModel(river_head="q8_0"))."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from routes import PAPER_RIVER

from river_cpp import ExitPolicy, RiverModel
from river_cpp.measure.configs import (
    RiverConfig,
    decode_on_river,
    full_river,
    river_at_tau,
    with_head,
    with_last_layers,
)

pytestmark = pytest.mark.usefixtures("river_cache")


def _types(path) -> dict[str, str]:
    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}


def test_river_head_of_its_own_type(tiny_llama4):
    config = with_head(RiverConfig("at 1", ExitPolicy.at_layer(1)), "q8_0")
    assert config.name == "at 1 head q8_0" and config.river_head == "q8_0"
    with (
        config.load(tiny_llama4, n_ctx=32) as q8_head,
        RiverModel(
            tiny_llama4, **{**PAPER_RIVER, "river_head": True}, policy=ExitPolicy.at_layer(1), n_ctx=32
        ) as q4_head,
        RiverModel(tiny_llama4, **PAPER_RIVER, policy=ExitPolicy.at_layer(1), n_ctx=32) as backbone_head,
    ):
        types = _types(q8_head.river_path)
        assert types["output.weight"] == "Q8_0" and types["blk.1.ffn_up.weight"] == "Q4_0"
        assert _types(q4_head.river_path)["output.weight"] == "Q4_0"
        assert q8_head.river_path != q4_head.river_path
        ids = q8_head.tokenize("Hello there")
        q8, q4, f16 = (m.forward(ids) for m in (q8_head, q4_head, backbone_head))
        # the same layers, three heads: Q8_0 lies closer to the backbone's F16 head than Q4_0
        assert np.abs(q8 - f16).max() > 0
        assert np.abs(q8 - f16).mean() < np.abs(q4 - f16).mean()
        # tokens that never leave use the backbone's head whatever the river's
        for model in (q8_head, backbone_head):
            model.reset()
        never = ExitPolicy.never()
        np.testing.assert_array_equal(q8_head.forward(ids, policy=never), backbone_head.forward(ids, policy=never))


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(river=None, river_head=True), "need a river"),
        (dict(river=None, river_head="q8_0"), "need a river"),
        (dict(river="{river_file}", river_head="q8_0"), "built rivers"),
    ],
)
def test_river_head_type_errors(tiny_llama4, options, message):
    with RiverModel(tiny_llama4, n_ctx=16) as model:
        river_file = str(model.river_path)
    options = {k: v.format(river_file=river_file) if isinstance(v, str) else v for k, v in options.items()}
    with pytest.raises(ValueError, match=message):
        RiverModel(tiny_llama4, n_ctx=16, **options)


def test_named_variants():
    at_tau = river_at_tau(0.98)
    mixed = with_last_layers(at_tau, 30, 4, "q8_0")
    assert mixed.name == "river tau=0.98 last 4 q8_0"
    assert dict(mixed.river_types) == {26: "q8_0", 27: "q8_0", 28: "q8_0", 29: "q8_0"}
    assert mixed.policy == at_tau.policy and at_tau.river_types == {}
    assert with_last_layers(full_river(), 30, 1, "q8_0").name == "full river q4_0 last 1 q8_0"
    with pytest.raises(ValueError):
        with_last_layers(at_tau, 4, 5, "q8_0")
    decode = decode_on_river("iq4_nl")
    assert decode.prefill == "backbone" and decode.policy == ExitPolicy.at_layer(0) and decode.river == "iq4_nl"
