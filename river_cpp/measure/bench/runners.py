"""Running the bench: configurations and peers loaded side by side, timed interleaved.

Owns what runs (our configurations as RiverModels, llama.cpp peers as
LlamaCppPeers) and the fixed token sequence they are fed. Every test runs the one
decode loop, river_cpp.decoding.generation.generate_step, with a sampler that forces the
sequence's tokens. The round-robin session lives in .session, the report in .report,
the peak-RSS child in .rss.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from river_cpp.decoding.generation import generate_step
from river_cpp.decoding.presets import PAPER
from river_cpp.engine.compute.backbone import Backbone
from river_cpp.engine.files.gguf_info import read_gguf_info
from river_cpp.measure.bench.report import BACKBONE_RUNG, LLAMA_ENGINE, RIVER_ENGINE
from river_cpp.measure.configs import RiverConfig, backbone_config, full_river, peer_name, river_at_tau
from river_cpp.measure.evaluate import ForcedTokens
from river_cpp.measure.ladder import LADDER_TYPES, rung_path

DEFAULT_PEERS: tuple[str, ...] = (BACKBONE_RUNG,) + tuple(LADDER_TYPES)


# ---------------------------------------------------------------- configurations


def default_configs(
    taus: Sequence[float] = (0.97, 0.98, 0.99),
    *,
    river: Optional[str] = PAPER.river,
    min_layer: int = PAPER.min_layer,
    with_full_river: bool = True,
) -> list[RiverConfig]:
    """Our backbone, River at each tau and the full river (river=None: the backbone alone)."""
    configs = [backbone_config()]
    if river is not None:
        configs += [river_at_tau(tau, river=river, min_layer=min_layer) for tau in taus]
        if with_full_river:
            configs.append(full_river(river))
    return configs


# ---------------------------------------------------------------- measure


def gguf_tensor_bytes(path: Union[str, os.PathLike]) -> int:
    """Total bytes of a GGUF file's tensors (llama-bench's model size), from its header."""
    return read_gguf_info(path).tensor_bytes


# ---------------------------------------------------------------- tokens


def bench_tokens(model_path: Union[str, os.PathLike], n_tokens: int) -> list[int]:
    """The fixed token sequence every configuration is fed: BOS (when the model adds
    one), then the project's chat prompts in the model's chat template, repeated."""
    from river_cpp.engine._ggml import set_ggml_verbosity
    from river_cpp.engine.compute.tokenizer import Tokenizer
    from river_cpp.measure.corpus import chat_prompts, document_tokens

    set_ggml_verbosity(False)  # loading a vocabulary logs every metadata key otherwise
    tokenizer = Tokenizer(os.fspath(model_path))
    try:
        bos = tokenizer.tokenize("", add_bos=True)
        stream = [token for doc in chat_prompts() for token in document_tokens(tokenizer, doc)]
    finally:
        tokenizer.close()
    return bos + list(itertools.islice(itertools.cycle(stream), max(0, n_tokens - len(bos))))


# ---------------------------------------------------------------- what runs


@dataclass(frozen=True)
class Target:
    """One row source: our engine in a configuration, or llama.cpp on a GGUF file."""

    name: str
    engine: str
    path: Path  # the backbone (ours) or the peer's GGUF
    config: Optional[RiverConfig] = None


@dataclass(frozen=True)
class Work:
    prompt: list[int]  # pp: from an empty cache
    context: list[int]  # tg: untimed prefill
    decode: list[int]  # tg: one timed step each


def _targets(backbone: Path, configs: Sequence[RiverConfig], peers: Sequence[str]) -> list[Target]:
    """What to run, checked before anything loads; ladder rungs are quantized here (once,
    cached), so that no timing waits for them."""
    if not backbone.is_file():
        raise FileNotFoundError(f"model file not found: {backbone}")
    for config in configs:
        if not isinstance(config, RiverConfig):
            raise TypeError(f"configs must be RiverConfig, got {type(config).__name__}")
    for rung in peers:
        if rung != BACKBONE_RUNG and rung not in LADDER_TYPES:
            raise ValueError(f"unknown llama.cpp peer {rung!r} (known: {', '.join(DEFAULT_PEERS)})")
    names = [config.name for config in configs] + [peer_name(rung) for rung in peers]
    if not names:
        raise ValueError("nothing to measure: no configurations and no peers")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"configuration names must be unique; repeated: {', '.join(map(repr, duplicates))}")
    targets = [Target(config.name, RIVER_ENGINE, backbone, config) for config in configs]
    targets += [Target(peer_name(rung), LLAMA_ENGINE, rung_path(backbone, rung)) for rung in peers]
    return targets


class Runner:
    """A loaded configuration or peer that runs a test and reports its speed."""

    def __init__(self, target: Target, model: Backbone) -> None:
        self.target = target
        self.model = model

    def run(self, kind: str, work: Work) -> tuple[float, Optional[float]]:
        """One ppN or tgN test: (tokens/s of its timed part, mean exit layer of its tokens).

        pp: the prompt's prefill from an empty cache, timed. tg: the context prefilled
        untimed, then one timed step per token of work.decode (forced: every
        configuration feeds the same tokens).
        """
        self.model.reset()
        if kind == "pp":
            steps = generate_step(self.model, work.prompt, ForcedTokens(work.prompt[-1:]))
            start = time.perf_counter()
            next(steps)
            seconds = time.perf_counter() - start
            steps.close()
            return len(work.prompt) / seconds, self._mean_exit(self.model.last_exit_layers)
        steps = generate_step(self.model, work.context, ForcedTokens(work.decode))
        next(steps)  # the context's prefill; its sampler chose decode[0]
        exit_layers = []
        start = time.perf_counter()
        for step in itertools.islice(steps, len(work.decode)):
            exit_layers.append(step.exit_layer)
        seconds = time.perf_counter() - start
        steps.close()
        return len(work.decode) / seconds, self._mean_exit(exit_layers)

    def _mean_exit(self, exit_layers: Sequence[int]) -> Optional[float]:
        """Our rows' mean exit layer; None for llama.cpp (it has no exits)."""
        return float(np.mean(exit_layers)) if self.target.engine == RIVER_ENGINE and len(exit_layers) else None

    def size_bytes(self) -> int:
        """Bytes of the weights loaded: the backbone's (or the peer's) and the river's."""
        river = getattr(self.model, "river_path", None)
        return gguf_tensor_bytes(self.target.path) + (gguf_tensor_bytes(river) if river is not None else 0)

    def close(self) -> None:
        self.model.close()


def open_runner(
    target: Target, *, n_ctx: int, n_threads: int, progress: bool = False, n_gpu_layers: int = -1
) -> Runner:
    """Load `target`'s model: a RiverModel in its configuration, or a LlamaCppPeer."""
    if target.engine == RIVER_ENGINE:
        assert target.config is not None
        model = target.config.load(
            target.path, n_ctx=n_ctx, n_threads=n_threads, progress=progress, n_gpu_layers=n_gpu_layers
        )
        return Runner(target, model)
    from river_cpp.measure.llama_peer import LlamaCppPeer

    peer = LlamaCppPeer(target.path, n_ctx=n_ctx, n_threads=n_threads, name=target.name, n_gpu_layers=n_gpu_layers)
    return Runner(target, peer)
