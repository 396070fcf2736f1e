"""A GGUF file's header as the engine reads it: metadata, value types, tensor table.

Wraps river_cpp.engine._core.gguf_info, the engine's own bounded parser: it reads the header
only (no mapping, no tensor data), validates it as a model load would (a malformed
file raises RiverError naming the file and the problem) and summarises long arrays
such as tokenizer vocabularies, so inspecting a multi-GB model takes milliseconds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from river_cpp.engine import _core

# Arrays longer than this come back as an ArraySummary (vocabularies, merges, scores).
DEFAULT_MAX_ARRAY = 1024


@dataclass(frozen=True)
class ArraySummary:
    """A metadata array too long to convert: its element type and length only."""

    element_type: str  # "string", "float32", "int32", ...
    length: int


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table."""

    name: str
    type: str  # ggml type name: "f32", "f16", "q8_0", ...
    shape: tuple[int, ...]  # ggml order: shape[0] is the row length
    n_bytes: int
    offset: int  # of the first byte, from the start of the file


@dataclass(frozen=True)
class GgufInfo:
    """The header of one GGUF file."""

    path: Path
    version: int
    alignment: int
    data_offset: int  # where the tensor data section starts
    file_size: int
    metadata: dict[str, Any]  # key -> int, float, bool, str, list, or ArraySummary
    types: dict[str, str]  # key -> "uint32", "string", "array[string]", ...
    tensors: tuple[TensorInfo, ...]

    @classmethod
    def read(cls, path: Union[str, os.PathLike], *, max_array: Optional[int] = DEFAULT_MAX_ARRAY) -> GgufInfo:
        """Parse `path`'s header; arrays longer than max_array (None: no limit) are summarised."""
        raw = _core.gguf_info(os.fspath(path), -1 if max_array is None else max_array)
        metadata = {
            key: ArraySummary(value["element_type"], value["length"]) if isinstance(value, dict) else value
            for key, value in raw["metadata"].items()
        }
        tensors = tuple(
            TensorInfo(t["name"], t["type"], tuple(t["shape"]), t["n_bytes"], t["offset"]) for t in raw["tensors"]
        )
        return cls(
            Path(path),
            raw["version"],
            raw["alignment"],
            raw["data_offset"],
            raw["file_size"],
            metadata,
            dict(raw["types"]),
            tensors,
        )

    @property
    def arch(self) -> str:
        """general.architecture ("llama", "qwen2", ...); KeyError when absent."""
        return self.metadata["general.architecture"]

    @property
    def n_layer(self) -> int:
        """<arch>.block_count; KeyError when absent."""
        return self.metadata[f"{self.arch}.block_count"]

    @property
    def tensor_bytes(self) -> int:
        """Bytes of all tensor data (padding excluded)."""
        return sum(t.n_bytes for t in self.tensors)

    def tensor(self, name: str) -> Optional[TensorInfo]:
        """The tensor called `name`, or None."""
        return next((t for t in self.tensors if t.name == name), None)

    def get(self, key: str, default: Any = None) -> Any:
        """A metadata value, or `default` when the key is absent."""
        return self.metadata.get(key, default)


def read_gguf_info(path: Union[str, os.PathLike], *, max_array: Optional[int] = DEFAULT_MAX_ARRAY) -> GgufInfo:
    """The header of the GGUF at `path` (see GgufInfo.read)."""
    return GgufInfo.read(path, max_array=max_array)
