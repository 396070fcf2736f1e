"""A projection, not a measurement: lossless decoding's speed on a device where
bandwidth rules, from the counts of CPU runs (benchmarks/speculative.py --json);
river_bench.projection states the assumptions.

    python benchmarks/projection.py docs/results/lossless-*.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional, Sequence

from river_bench.projection import project


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="JSON files written by benchmarks/speculative.py --json")
    args = p.parse_args(argv)
    print("| model | prompts | configuration | CPU, measured | bandwidth-bound, projected |")
    print("|---|---|---|---:|---:|")
    for path in args.runs:
        run = json.loads(Path(path).read_text())
        if "weight_bytes" not in run:
            continue
        for name, measured, projected in project(run):
            print(f"| {run['model']} | {run['prompts']} | {name} | {measured:.2f} | {projected:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
