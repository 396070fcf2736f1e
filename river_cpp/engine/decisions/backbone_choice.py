"""Which backbone runs a GGUF: river-cpp's graph where it builds the file's
architecture, llama.cpp's own context for every other one (no list of llama.cpp's names
is consulted: llama.cpp itself says, when it loads the file, whether it knows the
architecture). The one place this is decided; the facade (river_cpp.RiverModel) asks,
and `info` and `generate -v` print why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Union

from river_cpp.engine import _core
from river_cpp.engine.files.gguf_info import read_gguf_info

GRAPH = "graph"
LLAMA_CPP = "llama.cpp"
ENGINES = ("auto", GRAPH, LLAMA_CPP)


@dataclass(frozen=True)
class BackboneChoice:
    """The backbone a file runs on (GRAPH or LLAMA_CPP), its architecture, and why."""

    kind: str
    arch: str
    reason: str

    def describe(self) -> str:
        return f"backbone: {self.kind} ({self.reason})"


def choose_backbone(path: Union[str, os.PathLike], engine: str = "auto") -> BackboneChoice:
    """The backbone of the GGUF at `path`: `engine` "graph" or "llama.cpp" as asked, or
    "auto": the graph for the architectures it builds (the river, lossy exits), llama.cpp
    for every other (exact decoding and the drafts that need no river; where llama.cpp
    does not know the architecture either, its load raises one error that says both).
    A header without a readable architecture goes to the graph, whose loader says what
    is wrong with it."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    built = _core.graph_architectures()
    try:
        arch = str(read_gguf_info(path).arch)
    except (KeyError, ValueError, OSError, _core.RiverError):
        arch = "?"  # a header the graph's loader describes in its own error
    if "\ufffd" in arch or not arch.isprintable():
        arch = "?"  # bytes that are no name (a damaged header): the graph's loader shows them escaped
    if engine == GRAPH:
        return BackboneChoice(GRAPH, arch, "asked for (engine='graph')")
    if engine == LLAMA_CPP:
        return BackboneChoice(LLAMA_CPP, arch, "asked for (engine='llama.cpp')")
    if arch in built:
        return BackboneChoice(GRAPH, arch, f"river-cpp's graph builds '{arch}': the river and its exits are available")
    if arch == "?":
        return BackboneChoice(GRAPH, arch, "no architecture could be read from the file's header")
    return BackboneChoice(
        LLAMA_CPP,
        arch,
        f"river-cpp's graph builds {', '.join(built)}, not '{arch}': llama.cpp's context runs it, "
        "with exact drafts but no river",
    )
