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

from river_cpp.engine.files.cache import cache_dir, file_identity, file_sha256
from river_cpp.engine.files.convert import convert_to_f16

# A release's type tag as the last dot-separated part of its name: "x.Q4_1.gguf".
_TYPE_TAG = re.compile(r"^(I?Q\d.*|F16|F32|BF16)$", re.IGNORECASE)


def f16_backbone_path(release: Path, *, progress: bool = True) -> Path:
    """The F16 dequantization of `release`, built into cache_dir() on first use.

    The cached file is rebuilt when the release's contents change. A sidecar JSON next
    to it records the release's cheap identity (size, mtime, the hash of its first MiB)
    and the hash of its whole contents. Where the cheap identity differs only by mtime,
    the whole hash decides: a release installed again (each fresh virtual environment
    gets the demo package's file with a new mtime) is the same release, and converting
    it again replaced the cached file under every process that had it mapped.
    """
    release = Path(release)
    if not release.is_file():
        raise FileNotFoundError(f"model file not found: {release}")
    backbone = cache_dir() / f"{_base_name(release)}.F16.gguf"
    sidecar = backbone.with_name(backbone.name + ".json")
    identity = file_identity(release)
    recorded = _read_json(sidecar)
    recorded = recorded if isinstance(recorded, dict) else {}
    if backbone.is_file() and all(recorded.get(key) == value for key, value in identity.items()):
        return backbone
    contents = file_sha256(release)
    same_release = recorded.get("sha256") == contents and recorded.get("size") == identity["size"]
    if not (backbone.is_file() and same_release):
        convert_to_f16(release, backbone, progress=progress)
    # Written after the backbone, so a recorded identity always describes the file beside it.
    _write_json_atomically(sidecar, {**identity, "sha256": contents})
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
