"""Time to first token of a second chat turn, with the prompt cache and without it
(model.reset() before the turn), on the demo model (river_bench.chat_ttft).

    python benchmarks/chat_ttft.py [-t 2] [-r 5] [--speculative]
"""

from __future__ import annotations

import argparse
import statistics
from typing import Optional, Sequence

from river_cpp.apps.cli._common import add_threads_argument
from river_cpp.apps.demo import demo_backbone_path
from river_cpp.model import RiverModel

from river_bench.chat_ttft import cached_and_cold


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_threads_argument(parser)
    parser.add_argument("-r", "--repetitions", type=int, default=5)
    parser.add_argument("--speculative", action="store_true")
    args = parser.parse_args(argv)
    options = {"speculative": True} if args.speculative else {}
    with RiverModel(demo_backbone_path(), n_threads=args.threads, n_ctx=2048, progress=False) as model:
        results = cached_and_cold(model, args.repetitions, **options)
    for mode, values in results.items():
        print(
            f"{mode}: median time to first token {1000 * statistics.median(values):.1f} ms "
            f"(min {1000 * min(values):.1f}, {len(values)} runs)"
        )


if __name__ == "__main__":
    main()
