"""The `river-cpp` command: a dispatcher over one module per subcommand.

Each module in this package (generate, build_river, ...) owns its subcommand: an
`add_parser(subparsers)` that declares the arguments and a `run(args)` that drives
the Python API. This module only builds the parser and turns errors a user can fix
into one line without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional, Sequence

from river_cpp import RiverError

# Subcommand modules of this package, in the order `river-cpp --help` lists them.
# Each is imported only to declare its arguments; what it runs it imports in run().
COMMANDS = (
    "generate",
    "chat",
    "serve",
    "build_river",
    "convert",
    "bench",
    "eval",
    "calibrate",
    "humaneval",
    "rpc_server",
    "info",
    "check_exact",
)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line `argv` (default sys.argv[1:]); the exit status."""
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except (FileNotFoundError, IsADirectoryError, ConnectionError, ValueError, RiverError) as error:
        print(f"river-cpp: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130  # the shell's convention for SIGINT


def parser() -> argparse.ArgumentParser:
    """The `river-cpp` argument parser, with every subcommand of COMMANDS."""
    top = argparse.ArgumentParser(
        prog="river-cpp", description="GGUF language models with River-LLM seamless early exit."
    )
    subparsers = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"river_cpp.apps.cli.{name}").add_parser(subparsers)
    return top
