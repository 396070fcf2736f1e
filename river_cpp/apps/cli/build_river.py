"""`river-cpp build-river`: quantize a backbone into its river GGUF."""

from __future__ import annotations

import argparse
import sys

from river_cpp.apps.cli._common import add_common_arguments
from river_cpp.engine.files.river import DEFAULT_HEAD_TYPE, DEFAULT_RIVER_TYPE


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("build-river", help="quantize a backbone into its river GGUF")
    p.add_argument("model", metavar="MODEL", help="backbone GGUF file")
    p.add_argument("--type", default=DEFAULT_RIVER_TYPE, help=f"river type (default {DEFAULT_RIVER_TYPE})")
    p.add_argument("--output", "-o", metavar="PATH", help="where to write it (default: the river cache)")
    add_common_arguments(p, model=None)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from river_cpp import RiverModel
    from river_cpp.engine.files.river import RiverSpec, build_river

    if args.output is None:
        with RiverModel(args.model, river=args.type, n_threads=args.threads, n_ctx=16) as model:
            written = model.river_path
    else:
        spec = RiverSpec(default_type=args.type, head_type=DEFAULT_HEAD_TYPE)
        with RiverModel(args.model, river=None, n_threads=args.threads, n_ctx=16) as model:
            written = build_river(model.engine, Path(args.model), spec, Path(args.output), n_threads=model.n_threads)
    print(f"river-cpp: river at {written}", file=sys.stderr)
    return 0
