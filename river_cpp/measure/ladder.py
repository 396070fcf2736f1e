"""llama.cpp's quantization ladder of a backbone: the peers River is compared with.

Each rung is made once with llama-cpp-python's quantize API and cached next to the
rivers; a rung made from a different backbone file is made again.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
from pathlib import Path
from typing import Sequence

import llama_cpp

from river_cpp.engine.files.cache import cache_dir, file_identity

# llama_ftype values of the rungs, best quality first.
LADDER_TYPES: dict[str, int] = {
    "Q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0,
    "Q6_K": llama_cpp.LLAMA_FTYPE_MOSTLY_Q6_K,
    "Q5_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_K_M,
    "Q4_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M,
    "Q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0,
}


# The peer rung that names the backbone GGUF itself, whatever its type (F16 in this project).
BACKBONE_RUNG = "F16"


def rung_path(backbone: Path, rung: str) -> Path:
    """The GGUF llama.cpp runs as peer `rung`: the backbone itself for BACKBONE_RUNG, else
    its cached quantization (ladder_path)."""
    return Path(backbone) if rung == BACKBONE_RUNG else ladder_path(backbone, rung)


def ladder_path(backbone: Path, name: str) -> Path:
    """The cached llama.cpp quantization `name` (a LADDER_TYPES key) of `backbone`, made on demand."""
    if name not in LADDER_TYPES:
        raise ValueError(f"unknown llama.cpp quantization {name!r} (known: {', '.join(LADDER_TYPES)})")
    backbone = Path(backbone)
    out = cache_dir() / "ladder" / f"{backbone.stem}.{name}.gguf"
    stamp = out.with_suffix(".json")
    identity = file_identity(backbone)
    if out.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == identity:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(f".partial.{os.getpid()}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = LADDER_TYPES[name]
    params.allow_requantize = True
    try:
        with _quiet_llama():
            status = llama_cpp.llama_model_quantize(str(backbone).encode(), str(partial).encode(), ctypes.byref(params))
        if status != 0:
            raise RuntimeError(f"llama.cpp could not quantize {backbone} to {name}")
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)
    stamp.write_text(json.dumps(identity))
    return out


def ladder(backbone: Path, names: Sequence[str] = tuple(LADDER_TYPES)) -> dict[str, Path]:
    """Every requested rung of `backbone`'s ladder, by name."""
    return {name: ladder_path(backbone, name) for name in names}


@contextlib.contextmanager
def _quiet_llama():
    """Silence llama.cpp's per-tensor quantization log (it goes through llama-cpp-python's logger)."""
    logger = logging.getLogger("llama-cpp-python")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
