"""`river-cpp calibrate`: exit thresholds that keep a quality target at the least backbone depth."""

from __future__ import annotations

import argparse
import sys

from river_cpp.apps.cli._common import add_common_arguments, add_paper_river_arguments, model_path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="choose exit thresholds that keep a quality target at the least backbone depth",
        description="On half of the corpus, find the uniform tau and the per-layer thresholds (a quantile of each "
        "depth's signal) that meet the target at the least mean exit depth; save the better one as a "
        "policy file for `generate --policy`, and report its quality on the other half.",
    )
    add_common_arguments(
        p, tokens=1024, tokens_help="decode positions of the calibration half, and of the held-out half"
    )
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--target-top1",
        type=float,
        metavar="RATE",
        help="keep the same top-1 as the backbone at least this often (e.g. 0.97)",
    )
    target.add_argument("--max-kld", type=float, metavar="X", help="keep the mean KL divergence at most X (nats)")
    p.add_argument("--output", "-o", metavar="FILE", default="policy.json", help="policy file (default policy.json)")
    add_paper_river_arguments(p)
    p.add_argument("--signal", default="cosine", choices=["cosine", "update_norm"], help="exit signal (cosine)")
    p.add_argument("--corpus", nargs="+", metavar="FILE", help="text files (default: as for eval)")
    p.add_argument("--steps", type=int, default=6, metavar="N", help="bisection steps per family (6)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tqdm import tqdm

    from river_cpp import RiverModel
    from river_cpp.measure.calibrate import Target, calibrate, split_workloads
    from river_cpp.measure.corpus import load_corpus

    target = Target(top1=args.target_top1, max_kld=args.max_kld)
    if not Path(args.output).resolve().parent.is_dir():
        raise FileNotFoundError(f"no folder for {args.output}")
    if args.steps < 1:
        raise ValueError("--steps must be a positive integer")
    path = model_path(args.model)
    # thresholds for River as eval and humaneval run it (RiverConfig): the prompt exits
    # too and exited tokens keep the backbone's head, whatever RiverModel's defaults
    with RiverModel(
        path, river=args.river, prefill="exit", river_head=False, n_threads=args.threads, n_ctx=512
    ) as model:
        calibration, held_out = split_workloads(model.tokenizer, load_corpus(args.corpus), tokens=args.tokens)
        result = calibrate(
            model,
            calibration,
            target,
            held_out=held_out,
            signal=args.signal,
            min_layer=args.min_layer,
            steps=args.steps,
            progress=lambda items, desc: tqdm(items, desc=desc, leave=False),
        )
        n_layer = model.n_layer
    print(f"| family | parameter | mean exit / {n_layer} | same top-1 | mean KLD | meets {target} |")
    print("|---|---|---|---|---|---|")
    for t in result.trials:
        print(
            f"| {t.family} | {t.parameter:.5f} | {t.mean_exit:.2f} | {t.report.same_top1:.4f} | "
            f"{t.report.mean_kl:.5f} | {'yes' if target.met(t.report) else 'no'} |"
        )
    chosen, held = result.chosen, result.held_out
    print(
        f"\nchosen: {chosen.family} {chosen.parameter:.5f}, mean exit layer {chosen.mean_exit:.2f} of {n_layer} "
        f"on the calibration half"
    )
    print(
        f"held out ({held.n_positions} positions): mean exit layer {result.held_out_mean_exit:.2f}, same top-1 "
        f"{held.same_top1:.4f}, mean KLD {held.mean_kl:.5f} ± {held.mean_kl_se:.5f}"
        f"{'' if target.met(held) else ' (misses the target on held-out text)'}"
    )
    chosen.policy.save(
        args.output,
        model=str(path),
        river=args.river,
        prefill="exit",
        head="backbone",
        target=str(target),
        family=chosen.family,
        parameter=chosen.parameter,
        calibration={
            "mean_exit": chosen.mean_exit,
            "same_top1": chosen.report.same_top1,
            "mean_kl": chosen.report.mean_kl,
        },
        held_out={"mean_exit": result.held_out_mean_exit, "same_top1": held.same_top1, "mean_kl": held.mean_kl},
    )
    print(f"river-cpp: wrote {args.output} (use: river-cpp generate --policy {args.output} ...)", file=sys.stderr)
    return 0
