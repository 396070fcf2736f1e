"""Weight bytes a decoded token reads: a speed measure that does not depend on the machine.

Decoding one token at a time is bound by memory bandwidth, so the bytes of the
matrices it multiplies with predict its cost. A token that ran d backbone layers
reads the backbone's layer matrices below d, the river's from d on (the backbone's
again in a backbone tail) and one LM head. Norms, biases and the embedding row are
left out: they are a few kilobytes next to megabytes of matrices.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import numpy as np

_LAYER = re.compile(r"blk\.(\d+)\.")


@dataclass(frozen=True)
class WeightBytes:
    """Matrix bytes per layer of a backbone and its river, and of their LM heads."""

    backbone_layers: tuple[int, ...]
    backbone_head: int
    river_layers: Optional[tuple[int, ...]] = None
    river_head: int = 0

    @classmethod
    def of_files(cls, backbone: Union[str, os.PathLike], river: Union[str, os.PathLike, None] = None) -> WeightBytes:
        """Read the tensor tables of a backbone GGUF and, optionally, its river GGUF."""
        weights = cls(*_matrix_bytes(backbone))
        return weights if river is None else weights.with_river(river)

    def with_river(self, river: Union[str, os.PathLike]) -> WeightBytes:
        """These backbone bytes with the river GGUF at `river`."""
        river_layers, river_head = _matrix_bytes(river)
        if len(river_layers) != self.n_layer:
            raise ValueError(f"the river has {len(river_layers)} layers, the backbone {self.n_layer}")
        return WeightBytes(self.backbone_layers, self.backbone_head, river_layers, river_head)

    @property
    def n_layer(self) -> int:
        return len(self.backbone_layers)

    def full_backbone(self) -> int:
        """Bytes of a token that never leaves the backbone."""
        return sum(self.backbone_layers) + self.backbone_head

    def per_token(self, exit_layers: Sequence[int], *, tail_layers: int = 0, river_head: bool = False) -> np.ndarray:
        """Bytes each token read, given the backbone layers it ran (n_layer: never left)."""
        exits = np.asarray(exit_layers, dtype=np.int64)
        if exits.size and (exits.min() < 0 or exits.max() > self.n_layer):
            raise ValueError(f"exit layers must lie in [0, {self.n_layer}]")
        backbone = np.asarray(self.backbone_layers, dtype=np.int64)
        if self.river_layers is None:
            if exits.size and exits.min() < self.n_layer:
                raise ValueError("tokens left the backbone, but there is no river")
            return np.full(exits.shape, self.full_backbone(), dtype=np.int64)
        river = np.asarray(self.river_layers, dtype=np.int64)
        # bytes of the backbone below each depth, of the river from each depth on
        backbone_below = np.concatenate([[0], np.cumsum(backbone)])
        river_from = np.concatenate([np.cumsum(river[::-1])[::-1], [0]])
        tail_start = self.n_layer - tail_layers
        # an exited token's tail runs on the backbone: from max(exit, tail_start) to the end
        tail_from = np.maximum(exits, tail_start)
        total = (
            backbone_below[exits]
            + river_from[exits]
            - river_from[tail_from]
            + (backbone_below[-1] - backbone_below[tail_from])
        )
        exited = exits < self.n_layer
        head = np.where(exited & river_head, self.river_head, self.backbone_head)
        return total + head


def _matrix_bytes(path: Union[str, os.PathLike]) -> tuple[tuple[int, ...], int]:
    """(bytes of each layer's matrices, bytes of the LM head) of a GGUF file.

    The head is `output.weight`, or the token embedding a tied model multiplies with.
    """
    from river_cpp.engine.files.gguf_info import read_gguf_info

    per_layer: dict[int, int] = {}
    sizes = {}
    for tensor in read_gguf_info(path).tensors:
        sizes[tensor.name] = int(tensor.n_bytes)
        match = _LAYER.match(tensor.name)
        if match and len(tensor.shape) >= 2:
            layer = int(match.group(1))
            per_layer[layer] = per_layer.get(layer, 0) + int(tensor.n_bytes)
    head = sizes.get("output.weight", sizes.get("token_embd.weight"))
    if head is None:
        raise ValueError(f"{path} has neither output.weight nor token_embd.weight")
    if sorted(per_layer) != list(range(len(per_layer))):
        raise ValueError(f"{path}: layer numbers are not 0..{len(per_layer) - 1}")
    return tuple(per_layer[i] for i in range(len(per_layer))), head
