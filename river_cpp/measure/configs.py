"""Named River configurations: what `river-cpp bench`, `eval`, `calibrate` and `humaneval` compare.

A configuration is everything that decides which weights a token multiplies with —
the river's types, the exit policy, the prefill mode, the tail and the head — so
that one name means the same model in every measurement.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Mapping, Optional, Union

from river_cpp.decoding.presets import PAPER
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.model import RiverModel


@dataclass(frozen=True)
class RiverConfig:
    """One way to run a backbone with (or without) its river."""

    name: str
    policy: ExitPolicy = field(default_factory=ExitPolicy.never)
    river: Optional[str] = PAPER.river  # a river type, a river file, or None (backbone only)
    river_types: Mapping[int, str] = field(default_factory=dict)
    prefill: str = PAPER.prefill
    tail_layers: int = 0
    river_head: Union[bool, str] = PAPER.river_head  # True: a head of the river's type; or a type name

    def load(
        self,
        backbone: Union[str, os.PathLike],
        *,
        n_ctx: int = 2048,
        n_threads: Optional[int] = None,
        progress: bool = False,
        n_gpu_layers: int = -1,
    ) -> RiverModel:
        """A RiverModel of `backbone` in this configuration."""
        return RiverModel(
            backbone,
            river=self.river,
            river_types=dict(self.river_types) or None,
            policy=self.policy,
            prefill=self.prefill,
            tail_layers=self.tail_layers,
            river_head=self.river_head,
            n_ctx=n_ctx,
            n_threads=n_threads,
            progress=progress,
            n_gpu_layers=n_gpu_layers,
        )


def backbone_config() -> RiverConfig:
    """The backbone alone, no river loaded."""
    return RiverConfig("backbone", river=None)


def river_at_tau(
    tau: float, *, river: str = PAPER.river, min_layer: int = PAPER.min_layer, signal: str = "cosine"
) -> RiverConfig:
    """The paper's River: exit when the state signal passes tau, checked from min_layer."""
    name = (
        f"river tau={tau:g}"
        + ("" if signal == "cosine" else f" {signal}")
        + ("" if river == PAPER.river else f" {river}")
    )
    return RiverConfig(name, ExitPolicy.uniform(tau, min_layer=min_layer, signal=signal), river=river)


def full_river(river: str = PAPER.river) -> RiverConfig:
    """Every token, prompt included, on the river: the 4-bit model River is built from."""
    return RiverConfig(f"full river {river}", ExitPolicy.at_layer(0), river=river)


def decode_on_river(river: str = PAPER.river) -> RiverConfig:
    """The prompt on the backbone (full-precision KV), every decoded token on the river."""
    return RiverConfig(
        f"backbone prompt, river decode {river}", ExitPolicy.at_layer(0), river=river, prefill="backbone"
    )


def with_last_layers(config: RiverConfig, n_layer: int, n_last: int, river_type: str) -> RiverConfig:
    """`config` with its river's last `n_last` layers (of `n_layer`) built as `river_type`."""
    if not 0 < n_last <= n_layer:
        raise ValueError(f"n_last must be in [1, {n_layer}], got {n_last}")
    types = {**config.river_types, **{layer: river_type for layer in range(n_layer - n_last, n_layer)}}
    return replace(config, name=f"{config.name} last {n_last} {river_type}", river_types=types)


def with_head(config: RiverConfig, head_type: str) -> RiverConfig:
    """`config` with exited tokens using an LM head of `head_type` instead of the backbone's."""
    return replace(config, name=f"{config.name} head {head_type}", river_head=head_type)


def peer_name(rung: str) -> str:
    """The name of a llama.cpp peer in every table: "llama.cpp F16" (the backbone GGUF) or a ladder rung."""
    return f"llama.cpp {rung}"
