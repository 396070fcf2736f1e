"""The Pareto comparison of docs/results.md: several `river-cpp eval` runs of one
backbone (say a Q4_0 river's sweep and a Q8_0 river's variants), the speed of every
configuration they measured in one interleaved `river_cpp.measure.bench.measure` run, and
one plot of them all (river_cpp.measure.pareto).

    python benchmarks/pareto.py --eval demo-eval.json demo-eval-q8_0.json \\
        --bench-json demo-bench.json --plot demo-pareto.png -t 2

The eval files must come from `river-cpp eval` runs with the options given here
(--tau, --signal-taus, --variants per river type) so that every row's configuration
can be rebuilt by name; rows whose configuration is not rebuilt get no speed.
"""

from __future__ import annotations

import argparse
from typing import Optional, Sequence

from river_cpp.apps.cli._common import add_threads_argument
from river_cpp.measure.bench import DEFAULT_PEERS, measure
from river_cpp.measure.pareto import measured_configs, merged, plot_pareto, speed_ratios


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
    add_threads_argument(parser)
    parser.add_argument("--repetitions", "-r", type=int, default=3)
    parser.add_argument("--bench-json", required=True, metavar="OUT")
    parser.add_argument("--plot", required=True, metavar="OUT.png")
    args = parser.parse_args(argv)

    comparison = merged(args.eval)
    report = measure(
        comparison.model,
        measured_configs(comparison, args.tau, args.signal_taus, args.q8_tau),
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
