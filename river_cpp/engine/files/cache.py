"""river-cpp's cache folder and the cheap identity of the files it derives from.

Derived files (the demo backbone, rivers) record the identity of their source and
are rebuilt when it changes.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import platformdirs

CACHE_DIR_ENV = "RIVER_CPP_CACHE_DIR"

# Enough of the file to tell two releases of the same size and mtime apart cheaply.
_IDENTITY_HASH_BYTES = 1 << 20


def cache_dir() -> Path:
    """river-cpp's cache folder ($RIVER_CPP_CACHE_DIR, else the user cache dir), created on demand."""
    path = Path(os.environ.get(CACHE_DIR_ENV) or platformdirs.user_cache_dir("river-cpp"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def file_identity(path: Path) -> dict:
    """What identifies a file's contents cheaply: size, mtime and a hash of its first MiB."""
    stat = path.stat()
    with open(path, "rb") as f:
        head_sha256 = hashlib.sha256(f.read(_IDENTITY_HASH_BYTES)).hexdigest()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "head_sha256": head_sha256}


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's whole contents (read in chunks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_IDENTITY_HASH_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def models_dir() -> Path:
    """Where scripts/fetch_models.py keeps the real models it assembles
    ($RIVER_MODELS_DIR, else <cache_dir>/models); not created here."""
    explicit = os.environ.get("RIVER_MODELS_DIR")
    return Path(explicit) if explicit else cache_dir() / "models"
