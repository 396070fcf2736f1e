"""The Pareto comparison of docs/results.md: several `river-cpp eval` runs of one
backbone (say a Q4_0 river's sweep and a Q8_0 river's variants), the speed of every
configuration they measured in one interleaved `river_cpp.measure.bench.measure` run, and
one plot of them all.

    python benchmarks/pareto.py --eval demo-eval.json demo-eval-q8_0.json \\
        --bench-json demo-bench.json --plot demo-pareto.png -t 2

The eval files must come from `river-cpp eval` runs with the options given here
(--tau, --signal-taus, --variants per river type) so that every row's configuration
can be rebuilt by name; rows whose configuration is not rebuilt get no speed.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Optional, Sequence

from river_cpp.decoding.presets import FAST
from river_cpp.measure import comparison as cmp
from river_cpp.measure.bench import DEFAULT_PEERS, default_configs, measure
from river_cpp.measure.pareto import plot_pareto, speed_ratios


def merged(paths: Sequence[str]) -> cmp.Comparison:
    """One Comparison with the rows of every file (first occurrence of a name wins)."""
    runs = [cmp.Comparison.load(p) for p in paths]
    first = runs[0]
    for run in runs[1:]:
        if (run.model, run.prefix, run.forced, run.n_chunks) != (
            first.model,
            first.prefix,
            first.forced,
            first.n_chunks,
        ):
            raise ValueError(f"eval runs differ in model or workload: {paths}")
    names: set[str] = set()
    rows = []
    for row in (r for run in runs for r in run.rows):
        if row.name not in names:
            names.add(row.name)
            rows.append(row)
    return replace(first, rows=rows)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eval", nargs="+", required=True, metavar="FILE", help="river-cpp eval --json files")
    parser.add_argument("--tau", type=float, nargs="+", default=[0.95, 0.97, 0.98, 0.99])
    parser.add_argument("--signal-taus", type=float, nargs="+", default=[0.75, 0.8, 0.85])
    parser.add_argument(
        "--q8-tau",
        type=float,
        nargs="+",
        default=[0.99],
        help="taus of the Q8_0 river's eval run (its variants: backbone_prompt, head)",
    )
    parser.add_argument("--threads", "-t", type=int, default=2)
    parser.add_argument("--repetitions", "-r", type=int, default=3)
    parser.add_argument("--bench-json", required=True, metavar="OUT")
    parser.add_argument("--plot", required=True, metavar="OUT.png")
    args = parser.parse_args(argv)

    comparison = merged(args.eval)
    configs = default_configs(args.tau)
    configs += [e.config for e in cmp.plan(comparison.n_layer, taus=args.tau, signal_taus=args.signal_taus)]
    configs += [
        e.config
        for e in cmp.plan(comparison.n_layer, taus=args.q8_tau, river=FAST.river, variants=["backbone_prompt", "head"])
    ]
    measured = {r.name for r in comparison.rows}
    unique = {c.name: c for c in configs if c.name in measured or c.name == "backbone"}
    report = measure(
        comparison.model,
        list(unique.values()),
        DEFAULT_PEERS,
        n_prompt=512,
        n_gen=128,
        repeats=args.repetitions,
        n_threads=args.threads,
    )
    report.save(args.bench_json)
    print(report.table())
    plot_pareto(comparison, args.plot, speeds=speed_ratios(report))
    print(f"wrote {args.bench_json} and {args.plot}")


if __name__ == "__main__":
    main()
