"""`river-cpp info`: what river-cpp runs on (versions, backends and devices, the CPU and
its extra buffer types, RPC, the cache folder), for users and bug reports."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("info", help="print versions, devices, CPU buffer types and the cache folder")
    p.add_argument("--json", action="store_true", help="print river_cpp.system_info() as JSON")
    p.add_argument(
        "--reprobe", action="store_true", help="probe the CPU's extra buffer types again instead of reading the cache"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import json

    from river_cpp.apps.info import format_system_info, system_info

    info = system_info(reprobe=args.reprobe)
    print(json.dumps(info, indent=1) if args.json else format_system_info(info))
    return 0
