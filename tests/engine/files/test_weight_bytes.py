"""Weight bytes per decoded token, from GGUF tensor tables and exit depths."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from river_cpp import RiverModel
from river_cpp.engine.files.weight_bytes import WeightBytes

pytestmark = pytest.mark.usefixtures("river_cache")


def _sizes(path) -> dict[str, int]:
    return {t.name: int(t.n_bytes) for t in gguf.GGUFReader(path).tensors}


def _layer(sizes: dict[str, int], layer: int) -> int:
    matrices = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
    return sum(sizes[f"blk.{layer}.{m}.weight"] for m in matrices)


@pytest.mark.slow
def test_bytes_follow_the_route_of_each_token(tiny_llama4):
    with RiverModel(tiny_llama4, river="q4_0", n_ctx=16) as model:
        river_path = model.river_path
    backbone, river = _sizes(tiny_llama4), _sizes(river_path)
    weights = WeightBytes.of_files(tiny_llama4, river_path)
    assert weights.backbone_layers == tuple(_layer(backbone, il) for il in range(4))
    assert weights.river_layers == tuple(_layer(river, il) for il in range(4))
    assert weights.backbone_head == backbone["output.weight"] and weights.river_head == river["output.weight"]
    assert weights.river_layers[0] < weights.backbone_layers[0]  # 4-bit vs F16

    b, r = weights.backbone_layers, weights.river_layers
    per_token = weights.per_token([0, 1, 3, 4])
    head = backbone["output.weight"]
    expected = [sum(r) + head, b[0] + sum(r[1:]) + head, sum(b[:3]) + r[3] + head, sum(b) + head]
    assert list(per_token) == expected
    assert weights.full_backbone() == expected[-1]
    # the river's head for exited tokens only
    with_head = weights.per_token([1, 4], river_head=True)
    assert list(with_head) == [b[0] + sum(r[1:]) + river["output.weight"], expected[-1]]
    # a backbone tail of 2 layers: exited tokens run layers 2 and 3 on the backbone
    tail = weights.per_token([0, 3, 4], tail_layers=2)
    assert list(tail) == [r[0] + r[1] + b[2] + b[3] + head, sum(b) + head, sum(b) + head]


@pytest.mark.slow
def test_tied_head_is_the_embedding_and_exits_need_a_river(tiny_llama):
    sizes = _sizes(tiny_llama)
    weights = WeightBytes.of_files(tiny_llama)
    assert "output.weight" not in sizes and weights.backbone_head == sizes["token_embd.weight"]
    assert list(weights.per_token([weights.n_layer] * 2)) == [weights.full_backbone()] * 2
    with pytest.raises(ValueError, match="no river"):
        weights.per_token([0])
    with pytest.raises(ValueError, match="exit layers"):
        weights.per_token([weights.n_layer + 1])
    assert weights.per_token(np.zeros(0, dtype=int)).size == 0


def test_river_of_another_model_is_rejected(tiny_llama, tiny_llama4):
    with RiverModel(tiny_llama4, river="q4_0", n_ctx=16) as model:
        river_path = model.river_path
    with pytest.raises(ValueError, match="layers"):
        WeightBytes.of_files(tiny_llama, river_path)
