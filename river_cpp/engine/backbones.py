"""F16 backbones of quantized releases: dequantized once, cached, rebuilt when the
release changes.

The models at hand are quantized releases; River needs a full-precision backbone to
exit from, and their F16 dequantizations serve as one. This module finds and caches
files; it does not load models.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path

from river_cpp.engine.cache import cache_dir, file_identity
from river_cpp.engine.convert import convert_to_f16

# A release's type tag as the last dot-separated part of its name: "x.Q4_1.gguf".
_TYPE_TAG = re.compile(r"^(I?Q\d.*|F16|F32|BF16)$", re.IGNORECASE)


def f16_backbone_path(release: Path, *, progress: bool = True) -> Path:
    """The F16 dequantization of `release`, built into cache_dir() on first use.

    The cached file is rebuilt when the release changes (size, mtime or the hash of
    its first MiB differ from those recorded in a sidecar JSON next to it).
    """
    release = Path(release)
    if not release.is_file():
        raise FileNotFoundError(f"model file not found: {release}")
    backbone = cache_dir() / f"{_base_name(release)}.F16.gguf"
    sidecar = backbone.with_name(backbone.name + ".json")
    identity = file_identity(release)
    if not (backbone.is_file() and _read_json(sidecar) == identity):
        convert_to_f16(release, backbone, progress=progress)
        # Written after the backbone, so a recorded identity always describes the file beside it.
        _write_json_atomically(sidecar, identity)
    return backbone


def _base_name(release: Path) -> str:
    """The release's name without ".gguf" and without a trailing type tag."""
    stem = release.name.removesuffix(".gguf")
    head, _, tag = stem.rpartition(".")
    return head if head and _TYPE_TAG.match(tag) else stem


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_json_atomically(path: Path, value: object) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        tmp.write_text(json.dumps(value, indent=2) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
