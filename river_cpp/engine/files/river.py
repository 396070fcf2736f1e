"""The river: where its GGUF comes from (a given file, or built and cached).

A river holds the backbone's block matrices re-quantized to low-bit types (built
in-process by ggml's quantizer in river_cpp.engine._core) plus a low-bit LM head. Cached
files are named by the backbone's path and the river's types and record the
backbone's identity; the engine checks a loaded river against its backbone.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from river_cpp.engine import _core
from river_cpp.engine.files.cache import cache_dir, file_identity
from river_cpp.engine.files.gguf_info import read_gguf_info

# A river built without further instructions (`build-river`, RiverSpec()): IQ4_NL drafted
# as fast as Q4_0 and was accepted as often or more: 1.20x vs 1.14x (0.5B, HumanEval),
# 1.16x vs 1.11x (1.5B, chat), ties elsewhere.
DEFAULT_RIVER_TYPE = "iq4_nl"
# Its head, a draft's (the lossless preset's): a river draft's
# head is a large share of its cost, and a draft only needs the top tokens right.
DEFAULT_HEAD_TYPE = "q4_0"


@dataclass(frozen=True)
class RiverSpec:
    """Which type each layer's river matrices get."""

    default_type: str = DEFAULT_RIVER_TYPE
    layer_types: Mapping[int, str] = field(default_factory=dict)
    head_type: str = DEFAULT_HEAD_TYPE

    def __post_init__(self) -> None:
        # Canonical ggml names; raises RiverError for unknown or imatrix-only types.
        object.__setattr__(self, "default_type", _core.river_type_name(self.default_type))
        object.__setattr__(self, "head_type", _core.river_type_name(self.head_type))
        layer_types = {}
        for layer, name in dict(self.layer_types).items():
            if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
                raise ValueError(f"river_types keys must be layer indices, got {layer!r}")
            layer_types[layer] = _core.river_type_name(name)
        object.__setattr__(self, "layer_types", dict(sorted(layer_types.items())))

    def types_for(self, n_layer: int) -> list[str]:
        beyond = [layer for layer in self.layer_types if layer >= n_layer]
        if beyond:
            raise ValueError(f"river_types names layer {beyond[0]}, but the model has {n_layer} layers")
        return [self.layer_types.get(layer, self.default_type) for layer in range(n_layer)]

    def key(self) -> str:
        """A stable text naming this spec, stored in the river file."""
        return json.dumps(
            {"default": self.default_type, "layers": self.layer_types, "head": self.head_type}, sort_keys=True
        )


def river_cache_path(backbone_path: Path, spec: RiverSpec) -> Path:
    """Where the cached river of this backbone and spec lives."""
    # The backbone's identity is not part of the name: a changed backbone finds its
    # stale river here and rebuilds it in place.
    digest = hashlib.sha256(f"{backbone_path.resolve()}|{spec.key()}".encode()).hexdigest()[:16]
    tag = spec.default_type.lower() + ("-mixed" if spec.layer_types else "")
    return cache_dir() / "rivers" / f"{backbone_path.stem}.river-{tag}-{digest}.gguf"


def build_river(
    engine: _core.Engine, backbone_path: Path, spec: RiverSpec, out_path: Path, *, n_threads: int, progress: bool = True
) -> Path:
    """Quantize the engine's backbone into a river GGUF at out_path."""
    from tqdm import tqdm

    out_path.parent.mkdir(parents=True, exist_ok=True)
    metadata = _river_metadata(backbone_path, spec)
    with tqdm(
        total=7 * engine.n_layer + 1, desc=f"river {spec.default_type}", unit="tensor", disable=not progress
    ) as bar:

        def report(done: int, total: int) -> None:
            bar.update(done - bar.n)

        _core.build_river(
            engine, spec.types_for(engine.n_layer), spec.head_type, metadata, str(out_path), n_threads, report
        )
    return out_path


def load_cached_river(
    engine: _core.Engine, backbone_path: Path, spec: RiverSpec, *, n_threads: int, progress: bool = True
) -> Path:
    """Load the cached river of this backbone and spec into the engine, building it
    first when it is missing, stale (the backbone changed) or unreadable."""
    path = river_cache_path(backbone_path, spec)
    expected = _river_metadata(backbone_path, spec)
    if path.is_file() and _string_metadata(path, expected.keys()) == expected:
        try:
            engine.load_river(str(path))
            return path
        except _core.RiverError:
            pass  # damaged: rebuild below
    build_river(engine, backbone_path, spec, path, n_threads=n_threads, progress=progress)
    engine.load_river(str(path))
    return path


def _river_metadata(backbone_path: Path, spec: RiverSpec) -> dict[str, str]:
    """What a river file records of its making; a cached river is reused only when it matches."""
    return {
        "river.backbone.identity": json.dumps(file_identity(backbone_path), sort_keys=True),
        "river.spec": spec.key(),
    }


def _string_metadata(path: Path, keys) -> Optional[dict]:
    """The given string keys of a GGUF's metadata, or None when it cannot be read."""
    try:
        metadata = read_gguf_info(path).metadata
    except (OSError, _core.RiverError):
        return None
    return {key: metadata.get(key) for key in keys}
