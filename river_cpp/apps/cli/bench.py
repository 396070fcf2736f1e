"""`river-cpp bench`: prefill and decode tokens/s of River configurations and llama.cpp peers."""

from __future__ import annotations

import argparse
import sys

from river_cpp.apps.cli._common import (
    add_common_arguments,
    add_paper_river_arguments,
    add_signal_taus_argument,
    choices,
    model_path,
    n_layer,
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="prefill and decode tokens/s of River configurations and llama.cpp, llama-bench style",
        description="Prefill (pp) and decode (tg) tokens/s of our backbone, River at each tau, the full river "
        "and llama.cpp on the backbone and its quantizations, interleaved in one process; "
        "peak resident memory of each in a fresh process. The table goes to stdout.",
    )
    add_common_arguments(p)
    p.add_argument(
        "--tau",
        type=float,
        nargs="+",
        default=[0.97, 0.98, 0.99],
        metavar="TAU",
        help="River thresholds to measure (default 0.97 0.98 0.99)",
    )
    add_paper_river_arguments(p, allow_none=True)
    p.add_argument("--no-full-river", action="store_true", help="leave out the full river (every layer 4-bit)")
    p.add_argument(
        "--variants",
        nargs="+",
        default=["none"],
        metavar="NAME",
        help="also the configurations `river-cpp eval` adds: update_norm backbone_prompt river_types head, "
        "or all (default none), so that every eval row gets a speed",
    )
    add_signal_taus_argument(p)
    p.add_argument(
        "--peers",
        nargs="+",
        default=None,
        metavar="RUNG",
        help="llama.cpp peers: F16 (the backbone file) and quantizations of it, "
        "Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0 (default: all); none for no peers",
    )
    p.add_argument("--n-prompt", "-p", type=int, default=512, metavar="N", help="prompt tokens of the pp test (512)")
    p.add_argument("--n-gen", "-n", type=int, default=128, metavar="N", help="decoded tokens of the tg test (128)")
    p.add_argument("--repetitions", "-r", type=int, default=5, metavar="N", help="timed repetitions (5)")
    p.add_argument(
        "--n-gpu-layers",
        "-ngl",
        type=int,
        default=-1,
        metavar="N",
        help="layers on the GPU, ours and llama.cpp's (default -1: all; no effect without a GPU)",
    )
    p.add_argument("--no-memory", action="store_true", help="skip the peak-RSS runs (one process per configuration)")
    p.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from river_cpp.engine.compute.llama_backbone import extra_bufts_note
    from river_cpp.measure.bench import DEFAULT_PEERS, default_configs, measure

    if args.json and not Path(args.json).parent.is_dir():  # found out before the run, not after it
        raise FileNotFoundError(f"no folder for --json: {Path(args.json).parent}")
    from river_cpp.measure import comparison as cmp

    river = None if args.river.lower() == "none" else args.river
    peers = [rung.upper() for rung in choices(args.peers, DEFAULT_PEERS)]
    variants = [v.lower() for v in choices(args.variants, cmp.VARIANTS)]
    configs = default_configs(args.tau, river=river, min_layer=args.min_layer, with_full_river=not args.no_full_river)
    path = model_path(args.model)
    if variants and river is not None:
        names = {c.name for c in configs}
        configs += [
            e.config
            for e in cmp.plan(
                n_layer(path),
                taus=args.tau,
                signal_taus=args.signal_taus,
                river=river,
                min_layer=args.min_layer,
                variants=variants,
            )
            if e.config.name not in names
        ]
    report = measure(
        path,
        configs,
        peers,
        n_prompt=args.n_prompt,
        n_gen=args.n_gen,
        repeats=args.repetitions,
        n_threads=args.threads,
        memory=not args.no_memory,
        n_gpu_layers=args.n_gpu_layers,
    )
    print(report.table())
    note = extra_bufts_note()
    if note:
        print(f"note: {note}")
    if args.json:
        report.save(args.json)
        print(f"river-cpp: wrote {args.json}", file=sys.stderr)
    return 0
