"""`river-cpp chat`: talk with a model in the terminal (or through a pipe)."""

from __future__ import annotations

import argparse

from river_cpp.apps.cli._common import add_prompt_cache_argument, prompt_cache_bytes
from river_cpp.apps.cli.generate import (
    add_model_arguments,
    add_sampling_arguments,
    add_speculative_arguments,
    cli_decoding,
    open_model,
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "chat",
        help="chat with a model: streamed answers, history, /commands",
        description="Chat in the model's chat template. Commands: /reset, /stats, "
        '/tau X, /system TEXT, /exit; """ begins and ends a multi-line '
        "message; Ctrl+C stops an answer (twice quits).",
    )
    p.add_argument("--system", metavar="TEXT", help="system prompt")
    p.add_argument(
        "--max-tokens", "-n", type=int, default=512, metavar="N", help="most tokens per answer (default 512)"
    )
    add_prompt_cache_argument(p, default=1 << 30, held="earlier turns' (across /reset)")
    add_sampling_arguments(p, kind="repl")
    add_model_arguments(p)
    add_speculative_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from river_cpp.apps.chat import ChatSession, repl
    from river_cpp.decoding.presets import preset

    if args.max_tokens <= 0:
        raise ValueError(f"--max-tokens must be positive, got {args.max_tokens}")
    prompt_cache = prompt_cache_bytes(args)
    chosen = cli_decoding(args, kind="repl")
    with open_model(args, chosen, prompt_cache=prompt_cache) as model:
        session = ChatSession(model, system=args.system, max_tokens=args.max_tokens, sampling=chosen.sampling)
        min_layer = preset(args.preset).min_layer if args.min_layer is None else args.min_layer
        return repl(session, min_layer=min_layer)
