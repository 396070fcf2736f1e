"""A Hugging Face cache folder written by hand, so that the Hub's paths are tested
offline: models--OWNER--NAME/refs/main names a snapshot, and
snapshots/<commit>/<file> holds each file (huggingface_hub's layout; real files
where the library would link to blobs/, which it reads the same way)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Mapping

import pytest

# A made-up commit: the cache names snapshots by the commit they came from.
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def write_repo(cache: Path, repo_id: str, files: Mapping[str, Path]) -> Path:
    """Put `files` (name in the repository -> a file to copy) into `cache` as `repo_id`
    at refs/main; the snapshot folder."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    for name, source in files.items():
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, snapshot / name)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


def use_offline_cache(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    """HF_HUB_OFFLINE=1 and HF_HUB_CACHE=`cache`, for child processes (the variables)
    and this one (huggingface_hub reads them once, when it is first imported)."""
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
