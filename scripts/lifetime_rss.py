"""Load and lifetime: create, generate with and close a RiverModel many times in one
process, and print resident memory at the start and the end (run by hand, not by CI).

    python scripts/lifetime_rss.py MODEL.gguf [--cycles 1000] [--river q4_0] [--speculative]

Resident memory is read from /proc/self/statm after the first cycle (the first load
maps libraries and warms allocators) and every 100 cycles.
"""

from __future__ import annotations

import argparse
import os
import resource

from river_cpp import RiverModel


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--cycles", type=int, default=1000)
    p.add_argument("--river", default=None, help="a river type to load (default: none)")
    p.add_argument("--speculative", action="store_true", help="generate with lossless River")
    p.add_argument("--tokens", type=int, default=8)
    args = p.parse_args()

    marks = []
    for cycle in range(1, args.cycles + 1):
        with RiverModel(args.model, river=args.river, n_ctx=256, n_threads=1, progress=False) as model:
            model.generate("Once upon a time", max_tokens=args.tokens, speculative=args.speculative or None)
        if cycle == 1 or cycle % 100 == 0:
            marks.append((cycle, rss_mib()))
            print(f"cycle {cycle}: RSS {marks[-1][1]:.1f} MiB", flush=True)
    first, last = marks[0][1], marks[-1][1]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"RSS after cycle 1: {first:.1f} MiB, after cycle {args.cycles}: {last:.1f} MiB "
        f"({last - first:+.1f} MiB); peak {peak:.1f} MiB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
