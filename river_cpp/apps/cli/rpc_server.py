"""`river-cpp rpc-server`: serve this machine's CPU to other river-cpp (or llama.cpp)
processes through ggml's RPC backend, so that they can place layers here."""

from __future__ import annotations

import argparse
import sys

from river_cpp._net import is_loopback
from river_cpp.apps.cli._common import add_common_arguments

DEFAULT_PORT = 50052

WARNING = (
    "ggml's RPC protocol has no authentication and no encryption: anyone who can reach "
    "this port can run computations here and read what is sent. Never expose it to an "
    "untrusted network."
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("rpc-server", help="serve this machine's CPU to other machines' models (ggml RPC)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", "-p", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    add_common_arguments(p, model=None)
    p.add_argument(
        "--allow-remote", action="store_true", help="allow binding a non-loopback address (read the warning it prints)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from river_cpp._cpus import n_threads_or_default
    from river_cpp.engine import _core

    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in 1..65535, got {args.port}")
    if not is_loopback(args.host) and not args.allow_remote:
        raise ValueError(f"refusing to serve RPC on {args.host} (not loopback) without --allow-remote. {WARNING}")
    threads = n_threads_or_default(args.threads)
    if threads <= 0:
        raise ValueError(f"--threads must be positive, got {threads}")
    endpoint = f"[{args.host}]:{args.port}" if ":" in args.host else f"{args.host}:{args.port}"
    if not is_loopback(args.host):
        print(f"river-cpp: warning: {WARNING}", file=sys.stderr)
    print(f"river-cpp: serving this machine's CPU ({threads} threads) over RPC at {endpoint}", file=sys.stderr)
    sys.stderr.flush()
    _core.serve_rpc(endpoint, threads)
    return 0
