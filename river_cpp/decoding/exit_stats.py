"""Summaries of per-token exit records (how many backbone layers each token ran)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class ExitStats:
    """Where tokens left the backbone.

    ``histogram[d]`` counts tokens that ran d backbone layers (d = n_layer: never
    left); ``backbone_fraction_avoided`` is the share of backbone layer evaluations
    the river took over.
    """

    n_layer: int
    n_tokens: int
    mean_exit_layer: float
    histogram: tuple[int, ...]
    backbone_fraction_avoided: float

    @classmethod
    def from_exit_layers(cls, exit_layers: Sequence[int], n_layer: int) -> ExitStats:
        layers = np.asarray(exit_layers, dtype=np.int64)
        if layers.size == 0:
            return cls(n_layer, 0, float("nan"), (0,) * (n_layer + 1), 0.0)
        mean = float(layers.mean())
        histogram = tuple(int(c) for c in np.bincount(layers, minlength=n_layer + 1))
        return cls(n_layer, int(layers.size), mean, histogram, 1.0 - mean / n_layer)

    def summary(self) -> str:
        """One line for a terminal."""
        if self.n_tokens == 0:
            return "exit: no tokens"
        return (
            f"exit: mean layer {self.mean_exit_layer:.2f}/{self.n_layer}, "
            f"{100 * self.backbone_fraction_avoided:.1f}% of backbone layer evaluations avoided"
        )
