"""`river-cpp generate`: continue a prompt, streaming the text to stdout."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Union

from river_cpp.apps.cli._common import (
    add_common_arguments,
    add_hf_argument,
    add_speculative_arguments,
    decoding,
    model_path,
    n_layer,
)
from river_cpp.decoding.decision import Decoding, sampling_defaults
from river_cpp.decoding.presets import DEFAULT, PRESETS, Preset, preset
from river_cpp.decoding.sampling import SamplingParams
from river_cpp.engine.compute.load_options import KV_CACHE_TYPES

__all__ = [
    "add_model_arguments",
    "add_parser",
    "add_sampling_arguments",
    "add_speculative_arguments",
    "cli_decoding",
    "open_model",
    "run",
    "sampling",
]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("generate", help="continue a prompt, streaming the text to stdout")
    p.add_argument("prompt", help="the text to continue (with --chat: the user's message)")
    p.add_argument("--chat", action="store_true", help="send the prompt as a user message in the model's chat template")
    p.add_argument("--max-tokens", "-n", type=int, default=128, metavar="N", help="most tokens to generate (128)")
    p.add_argument("--stop", action="append", default=[], metavar="TEXT", help="stop before TEXT (repeatable)")
    p.add_argument(
        "--show-exits",
        action="store_true",
        help="colour each token by the backbone layers it ran, with a legend "
        "(plain text{layers} markers when stdout is not a terminal)",
    )
    add_sampling_arguments(p)
    add_model_arguments(p)
    add_speculative_arguments(p)
    p.set_defaults(run=run)


def add_sampling_arguments(p: argparse.ArgumentParser, *, kind: str = "generate") -> None:
    """--temperature, --top-k, --top-p, --min-p, --repeat-penalty, --seed (generate, chat),
    defaulting to the entry kind's (river_cpp.decoding.decision.SAMPLING_DEFAULTS)."""
    d = sampling_defaults(kind)
    p.add_argument("--temperature", type=float, default=d.temperature, help=f"0 is greedy (default {d.temperature:g})")
    p.add_argument("--top-k", type=int, default=d.top_k, help=f"0 disables (default {d.top_k})")
    p.add_argument("--top-p", type=float, default=d.top_p, help=f"1 disables (default {d.top_p:g})")
    p.add_argument("--min-p", type=float, default=d.min_p, help=f"0 disables (default {d.min_p:g})")
    p.add_argument("--repeat-penalty", type=float, default=d.repeat_penalty, help="1 disables (default 1)")
    p.add_argument("--seed", type=int, help="seed for sampling (default: random)")


def sampling(args: argparse.Namespace) -> SamplingParams:
    """The SamplingParams of add_sampling_arguments' options (and --stop where given)."""
    return SamplingParams(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        repeat_penalty=args.repeat_penalty,
        seed=args.seed,
        stop=tuple(getattr(args, "stop", ())),
    )


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """--model, --threads, --n-ctx and the river options (generate, chat, serve)."""
    add_common_arguments(p, model="GGUF file")
    add_hf_argument(p)
    p.add_argument("--n-ctx", type=int, default=2048, metavar="N", help="context length (default 2048)")
    for part, short in (("k", "-ctk"), ("v", "-ctv")):
        p.add_argument(
            f"--cache-type-{part}",
            short,
            choices=list(KV_CACHE_TYPES),
            default="f16",
            help=f"the type the KV cache stores {part.upper()} in (default f16; q8_0 about halves it"
            + (", with river-cpp's own attention)" if part == "v" else ")"),
        )
    p.add_argument("--verbose", "-v", action="store_true", help="print where each layer lives and the engine's log")
    p.add_argument(
        "--engine",
        choices=["auto", "graph", "llama.cpp"],
        default="auto",
        help="the backbone: river-cpp's graph (the river, lossy exits) or llama.cpp's own context (every "
        "architecture llama.cpp runs; exact drafts, no river); auto (default): the graph where it builds the file",
    )
    devices = p.add_argument_group("devices")
    devices.add_argument(
        "--n-gpu-layers",
        "-ngl",
        type=int,
        default=-1,
        metavar="N",
        help="backbone layers on the GPU or RPC devices, after the cache and the river (default -1: all that fit)",
    )
    devices.add_argument("--main-gpu", type=int, default=0, metavar="I", help="the device to fill first (default 0)")
    devices.add_argument(
        "--rpc",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="use the devices of these `river-cpp rpc-server`s (ggml built with -DGGML_RPC=on)",
    )
    river = p.add_argument_group("river (early exit)")
    river.add_argument(
        "--preset",
        choices=list(PRESETS),
        default=DEFAULT.name,
        help="lossless (default): the backbone's own tokens, drafted by n-gram matches and an "
        "IQ4_NL river and verified by the backbone; fast (lossy): a Q8_0 river and head, "
        "the prompt on the backbone, every decoded token on the river; paper (lossy): the "
        "paper's River (Q4_0 river, the backbone's head, the prompt exits too, tau 0.98); "
        "the options below override it (--tau, --exit-layer and --policy are lossy)",
    )
    river.add_argument(
        "--river",
        default=None,
        metavar="TYPE|PATH|none",
        help="river type to build (q4_0, q4_k, iq4_nl, q5_k, q6_k, q8_0), a river GGUF, "
        "or none for the backbone alone (default: the preset's)",
    )
    exits = river.add_mutually_exclusive_group()
    exits.add_argument("--tau", type=float, help="exit when the block similarity exceeds TAU (near 1, e.g. 0.99)")
    exits.add_argument(
        "--exit-layer",
        type=int,
        metavar="K",
        help="every token runs exactly K backbone layers (default 0: decode on the river)",
    )
    exits.add_argument("--policy", metavar="FILE", help="exit thresholds saved by `river-cpp calibrate`")
    river.add_argument(
        "--min-layer",
        type=int,
        default=None,
        metavar="N",
        help=f"with --tau: run at least N backbone layers (default: the preset's, {DEFAULT.min_layer})",
    )
    river.add_argument(
        "--prefill",
        choices=["exit", "backbone"],
        default=None,
        help="backbone: full-precision prompt; exit: the prompt exits too (default: the preset's)",
    )
    river.add_argument(
        "--tail-layers", type=int, default=0, metavar="M", help="exited tokens run the last M layers on the backbone"
    )
    river.add_argument(
        "--river-head",
        default=None,
        metavar="TYPE|river|backbone",
        help="LM head of exited tokens: a type, the river's own, or the backbone's "
        "(default: the preset's for a built river, a river file's own)",
    )


def _river(args: argparse.Namespace) -> Optional[str]:
    """--river's value, else the preset's (None: "none", the backbone alone), with
    "auto" decided here on args.model's file as RiverModel would decide it
    (river_cpp.engine.decisions.river_choice; -v says which and why). The decision is written
    back into args.river, so that the default draft and the model loaded agree."""
    from river_cpp.engine.decisions.river_choice import resolve_backbone_river

    river = args.river if args.river is not None else preset(args.preset).river
    if river.lower() == "none":
        return None
    exits = any(getattr(args, name, None) is not None for name in ("tau", "exit_layer", "policy"))
    _, river, choice = resolve_backbone_river(
        args.model, river, engine=getattr(args, "engine", "auto"), n_threads=args.threads, exits=exits
    )
    if choice is not None and args.verbose:
        print("river-cpp: " + choice.describe(), file=sys.stderr)
    args.river = os.fspath(river) if river is not None else "none"
    return None if river is None else args.river


def cli_decoding(args: argparse.Namespace, *, kind: str = "generate") -> Decoding:
    """How the command decodes (river_cpp.apps.cli._common.decoding) on the model the
    options name, whose layer count is read from its GGUF header; -hf is resolved
    (downloaded unless cached) and args.model set to the file, for open_model."""
    args.model, args.hf_repo = model_path(args.model, args.hf_repo), None
    sampled = sampling(args) if hasattr(args, "temperature") else None
    return decoding(args, n_layer=n_layer(args.model), has_river=_river(args) is not None, kind=kind, sampling=sampled)


def open_model(args: argparse.Namespace, chosen: Decoding, **options):
    """The RiverModel that add_model_arguments' options (and --seed) ask for, decoding
    by default as `chosen` (cli_decoding's) says."""
    from river_cpp import RiverModel

    the_preset = preset(args.preset)
    river = _river(args)
    return RiverModel(
        model_path(args.model, args.hf_repo),
        n_ctx=args.n_ctx,
        type_k=args.cache_type_k,
        type_v=args.cache_type_v,
        n_threads=args.threads,
        seed=getattr(args, "seed", None),
        engine=args.engine,
        river=river,
        policy=chosen.policy,
        speculative=chosen.speculative or False,
        prefill=args.prefill or the_preset.prefill,
        tail_layers=args.tail_layers,
        river_head=_river_head(args.river_head, the_preset, river),
        verbose=args.verbose,
        n_gpu_layers=args.n_gpu_layers,
        main_gpu=args.main_gpu,
        rpc_servers=[s.strip() for s in args.rpc.split(",")] if args.rpc else [],
        **options,
    )


def _river_head(value: Optional[str], chosen: Preset, river: Optional[str]) -> Union[bool, str, None]:
    """--river-head's value as RiverModel's river_head; not given: the preset's head for a
    river built here, a river file's own head (None) or the backbone's."""
    if value is not None:
        return {"river": True, "backbone": False}.get(value.lower(), value)
    if river is None or (isinstance(chosen.river_head, str) and river.endswith(".gguf")):
        return None
    return chosen.river_head


def run(args: argparse.Namespace) -> int:
    chosen = cli_decoding(args)
    with open_model(args, chosen) as model:
        prompt = args.prompt
        if args.chat:
            prompt = model.tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
        stream = model.generate(prompt, max_tokens=args.max_tokens, decoding=chosen, stream=True)
        if args.show_exits:
            from river_cpp.apps.exit_display import ExitPainter

            painter = ExitPainter(model.n_layer, color=sys.stdout.isatty())
            sys.stdout.write(painter.legend() + "\n")
        for chunk in stream:
            sys.stdout.write(painter.paint(chunk.text, chunk.exit_layer) if args.show_exits else chunk.text)
            sys.stdout.flush()
        sys.stdout.write("\n")
        result = stream.result
        model_has_river = model.has_river
    print(
        f"prompt: {len(result.prompt_token_ids)} tokens, {result.prompt_tokens_per_second:.1f} tokens/s | "
        f"generated: {len(result.token_ids)} tokens, {result.generation_tokens_per_second:.1f} tokens/s "
        f"| finish: {result.finish_reason}",
        file=sys.stderr,
    )
    speed = result.speculative.speed_summary() if result.speculative is not None else None
    if speed is not None:
        print(speed, file=sys.stderr)
    if result.speculative is not None and result.speculative.drafted == 0:
        print(
            "speculative: no draft on this text (nothing in the context, the memory or a corpus matched "
            "what came next), so every token was a plain step",
            file=sys.stderr,
        )
    elif result.speculative is not None:
        print(result.speculative.summary(), file=sys.stderr)
    elif model_has_river:
        print(result.exit_stats.summary(), file=sys.stderr)
    return 0
