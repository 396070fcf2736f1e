"""`river-cpp convert`: write an F16 copy of a GGUF file."""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("convert", help="write an F16 copy of a GGUF file (e.g. of a quantized release)")
    p.add_argument("src", metavar="SRC", help="GGUF file to read")
    p.add_argument("dst", metavar="DST", help="GGUF file to write")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from river_cpp.engine.files.convert import convert_to_f16  # gguf-py, which generating never needs

    written = convert_to_f16(args.src, args.dst)
    print(f"river-cpp: wrote {written}", file=sys.stderr)
    return 0
