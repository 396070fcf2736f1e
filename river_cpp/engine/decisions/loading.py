"""Opening a backbone: a path and LoadOptions in, the backbone that runs the file out,
with the choices that named it (which backbone, which river) and its thread governor.

The one place that picks between river-cpp's graph and llama.cpp's context and
refuses options a backbone cannot honour; it does not decode.
"""

from __future__ import annotations

import os
import sys
from typing import NamedTuple, Optional, Union

from river_cpp._cpus import ThreadGovernor
from river_cpp.engine.compute.graph_backbone import GraphBackbone
from river_cpp.engine.compute.llama_backbone import LlamaCppBackbone
from river_cpp.engine.compute.load_options import LoadOptions
from river_cpp.engine.decisions.backbone_choice import GRAPH, BackboneChoice
from river_cpp.engine.decisions.river_choice import RiverChoice, resolve_backbone_river


class OpenedBackbone(NamedTuple):
    """A loaded backbone and why it is the one: which backbone runs the file, and the
    default's river choice (None where the caller named the river, or on llama.cpp's)."""

    backbone: Union[GraphBackbone, LlamaCppBackbone]
    backbone_choice: BackboneChoice
    river_choice: Optional[RiverChoice]


def check_model_path(path: Union[str, os.PathLike]) -> str:
    """`path` as a string when it names a file; FileNotFoundError / IsADirectoryError."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"model file not found: {path}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"model path is a directory, not a GGUF file: {path}")
    return path


def open_backbone(path: Union[str, os.PathLike], options: LoadOptions, *, exits: bool = False) -> OpenedBackbone:
    """Load the GGUF at `path` on the backbone that runs it (river_cpp.engine.decisions.backbone_choice),
    with the river `options` name ("auto": the one that wins here, or none; resolved for a
    default decoding that `exits` or not). ValueError where llama.cpp's backbone is asked
    for what only the graph has."""
    path = check_model_path(path)
    # The backbone and the default's choice of river, before the backbone loads: the
    # river choice's first timing loads the file on its own.
    choice, river, river_choice = resolve_backbone_river(
        path, options.river, engine=options.engine, n_threads=options.n_threads, exits=exits
    )
    if options.verbose:
        print("river-cpp: " + choice.describe(), file=sys.stderr)
        if river_choice is not None:
            print("river-cpp: " + river_choice.describe(), file=sys.stderr)
    backbone: Union[GraphBackbone, LlamaCppBackbone]
    if choice.kind == GRAPH:
        backbone = GraphBackbone(path, options.replace(river=river))
    else:
        _check_without_river(choice, river, options)
        backbone = LlamaCppBackbone(
            path,
            n_ctx=options.n_ctx,
            n_threads=options.n_threads,
            n_gpu_layers=options.n_gpu_layers,
            main_gpu=options.main_gpu,
            use_mmap=options.use_mmap,
            verbose=options.verbose,
        )
    if options.adapt_threads:
        backbone.governor = ThreadGovernor(options.n_threads)
    return OpenedBackbone(backbone, choice, river_choice)


def _check_without_river(choice: BackboneChoice, river: object, options: LoadOptions) -> None:
    """ValueError naming the architecture where the llama.cpp backbone is asked for what
    only the graph has: a river, or a river's or graph's option."""
    what_works = (
        "it runs exactly, with drafts from n-grams, the draft memory, a corpus and grammars "
        "(river=None or 'auto', no exiting policy)"
    )
    where = f"'{choice.arch}' runs on llama.cpp's backbone ({choice.reason})"
    if river is not None:
        raise ValueError(f"river={river!r}: {where}, which has no river; {what_works}")
    graph_only = {
        "river_types": options.river_types,
        "river_head": options.river_head,
        "tail_layers": options.tail_layers,
        "rpc_servers": options.rpc_servers,
        "prefill": options.prefill if options.prefill != "backbone" else None,
        "type_k": options.type_k if options.type_k != "f16" else None,
        "type_v": options.type_v if options.type_v != "f16" else None,
    }
    for name, value in graph_only.items():
        if value:
            raise ValueError(f"{name}={value!r} needs river-cpp's graph backbone: {where}; {what_works}")
