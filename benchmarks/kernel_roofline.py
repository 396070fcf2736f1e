"""Our own products against the instruction's peak, per core (river_bench.kernel_roofline:
what is measured and how).

    python benchmarks/kernel_roofline.py [--kernels avx2] [--types q4_K q6_K] [--json out.json]
    python benchmarks/kernel_roofline.py --quick     # a small matrix and brief runs: seconds

Prints each kernel set's measured peak, then a Markdown table: GMAC/s on one thread per
kernel set, type and matrix shape at each column count, with the fraction of the
kernels' own peak. Everything runs on this one thread. The scalar reference is slow at
512 columns (seconds per product); leave it out with --kernels. Say the machine's load
with the numbers (the script prints the load average before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from river_cpp.engine import _core
from river_cpp.engine.probes.own_products import COVERED

from river_bench import kernel_roofline as roofline


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = _core.own_kernels()
    p.add_argument("--kernels", nargs="+", choices=here, default=here, help="kernel sets (default: all here)")
    p.add_argument("--types", nargs="+", choices=COVERED, default=list(COVERED), help="weight types (default: all)")
    p.add_argument(
        "--shapes",
        nargs="+",
        type=roofline.shape,
        metavar="ROWSxN_IN",
        help="matrix shapes (default: " + " ".join(f"{r}x{n}" for r, n in roofline.SHAPES) + ", the 1.5B's)",
    )
    p.add_argument("--columns", nargs="+", type=int, default=list(roofline.COLUMNS), help="column counts")
    p.add_argument("--seconds", type=float, help=f"seconds of runs per figure (default {roofline.SECONDS})")
    p.add_argument("--quick", action="store_true", help="a small matrix and brief runs (a test, not a measurement)")
    p.add_argument("--json", metavar="OUT", help="write the results here")
    args = p.parse_args(argv)
    shapes = args.shapes or (roofline.QUICK_SHAPES if args.quick else roofline.SHAPES)
    seconds = args.seconds if args.seconds is not None else roofline.QUICK_SECONDS if args.quick else roofline.SECONDS
    if any(n <= 0 for n in args.columns) or seconds < 0:
        p.error("column counts must be positive and --seconds not negative")
    try:
        roofline.check_shapes(shapes, args.types)
    except ValueError as e:
        p.error(str(e))

    load_before = os.getloadavg()[0]
    peaks, rows = roofline.measure(args.kernels, args.types, shapes, args.columns, seconds)
    load = [load_before, os.getloadavg()[0]]
    print("\n".join(roofline.table_lines(peaks, rows, args.columns)))
    print(f"\nload average (1 min) before {load[0]:.2f}, after {load[1]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(roofline.document(peaks, rows, seconds, load), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
