"""`river-cpp serve`: an OpenAI-compatible HTTP server (pip install 'river-cpp[server]')."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Union

from river_cpp.apps.cli._common import add_prompt_cache_argument, prompt_cache_bytes
from river_cpp.apps.cli.generate import add_model_arguments, add_speculative_arguments, cli_decoding, open_model

API_KEY_VARIABLE = "RIVER_CPP_API_KEY"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="an OpenAI-compatible server (/v1/chat/completions, /v1/completions)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument(
        "--api-key", metavar="KEY", help=f"require 'Authorization: Bearer KEY' (default: ${API_KEY_VARIABLE} if set)"
    )
    p.add_argument(
        "--alias",
        metavar="NAME",
        help="the model's id in /v1/models and in answers (default: the file name); a request naming any"
        " other model is served by this one",
    )
    # Defaults are ServerConfig's (not imported here: the server extra may be missing).
    p.add_argument(
        "--parallel",
        type=_parallel,
        default="auto",
        metavar="N|auto",
        help="requests run at once (slots), each on its own sequence of n-ctx positions, their forwards batched"
        " together; each answer is the one it would be alone. auto (default): up to 4, as many as a batched"
        " step serves for less than their separate steps on this file and host (timed once, cached)",
    )
    p.add_argument(
        "--queue", type=int, metavar="N", help="requests that may wait while --parallel run; more get 503 (default 8)"
    )
    p.add_argument("--max-body-bytes", type=int, metavar="N", help="largest request body (default 1 MiB)")
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="accept this Host header besides loopback names (repeatable; * accepts any)",
    )
    p.add_argument(
        "--cors-origin",
        action="append",
        metavar="ORIGIN",
        help="allow this browser origin (repeatable; default: http(s)://localhost pages only)",
    )
    p.add_argument("--insecure", action="store_true", help="allow binding a non-loopback address without --api-key")
    p.add_argument(
        "--share-drafts",
        action="store_true",
        help="draft from earlier requests' prompts and outputs (the model's draft memory): faster on "
        "repeated work, but one client's text then shapes another's timing",
    )
    add_prompt_cache_argument(p, default=2 << 30, held="earlier requests'")
    p.add_argument(
        "--share-prompt-cache",
        action="store_true",
        help="let a prompt cached for one API key serve every request (off: only requests with the same key; "
        "output never changes, only timing is shared)",
    )
    add_model_arguments(p)
    add_speculative_arguments(p)  # with the model options: how a request whose river field does not say decodes
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        from river_cpp.apps.server import ServerConfig, serve
    except ImportError as error:
        raise ValueError(f"river-cpp serve needs the server extra: pip install 'river-cpp[server]' ({error})") from None
    auto_parallel = args.parallel == "auto"
    limits = {
        "parallel": None if auto_parallel else args.parallel,
        "queue_size": args.queue,
        "max_body_bytes": args.max_body_bytes,
    }
    config = ServerConfig(
        host=args.host,
        port=args.port,
        api_key=args.api_key or os.environ.get(API_KEY_VARIABLE) or None,
        allowed_hosts=args.allowed_host,
        cors_origins=args.cors_origin,
        insecure=args.insecure,
        share_drafts=args.share_drafts,
        share_prompt_cache=args.share_prompt_cache,
        **{name: value for name, value in limits.items() if value is not None},
    )
    prompt_cache = prompt_cache_bytes(args)
    config.check()  # before loading anything
    # The served model's defaults: what a request whose `river` field does not say decodes with.
    chosen = cli_decoding(args)  # resolves -hf into args.model
    if auto_parallel:  # on the file just resolved, whose verify curve the river choice has timed
        config = dataclasses.replace(config, parallel=_auto_parallel(args))
    model_id = args.alias or os.path.basename(args.model)
    serve(lambda: open_model(args, chosen, prompt_cache=prompt_cache, n_seq_max=config.parallel), config, model_id)
    return 0


def _parallel(value: str) -> Union[int, str]:
    """--parallel's value: "auto" or a number (ServerConfig checks that it is positive)."""
    if value.strip().lower() == "auto":
        return "auto"
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--parallel takes a number or auto, got {value!r}") from None


def _auto_parallel(args: argparse.Namespace) -> int:
    """The slots `--parallel auto` runs on args.model (river_cpp.engine.decisions.parallel_choice),
    said on stderr; one on llama.cpp's backbone, which serves one sequence at a time."""
    from river_cpp.engine.decisions.backbone_choice import GRAPH, choose_backbone
    from river_cpp.engine.decisions.parallel_choice import choose_parallel

    if choose_backbone(args.model, args.engine).kind != GRAPH:
        return 1
    choice = choose_parallel(args.model, n_threads=args.threads)
    print(f"river-cpp serve: {choice.describe()}", file=sys.stderr, flush=True)
    return choice.slots
