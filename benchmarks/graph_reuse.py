"""Where a decoded token's time goes, with decode graphs reused and built afresh
(river_bench.graph_reuse: the configurations).

    python benchmarks/graph_reuse.py [-m MODEL.gguf] [-t 2] [-n 128] [-r 5]

Prints each configuration's medians over rounds (tokens/s, graph build and compute ms
per token, graphs per token) and the never-exit check's overhead; --json writes them.
"""

from __future__ import annotations

import argparse
import json
from typing import Optional, Sequence

from river_cpp.apps.cli._common import add_threads_argument
from river_cpp.apps.demo import demo_backbone_path
from river_cpp.model import RiverModel

from river_bench.graph_reuse import run, summarize, table_lines
from river_bench.options import add_model_argument, add_tokens_argument


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(parser, required=False, help="backbone GGUF (default: the demo model, F16)")
    add_threads_argument(parser)
    add_tokens_argument(parser, help="decoded tokens per timed run")
    parser.add_argument("-r", "--rounds", type=int, default=5)
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args(argv)

    path = args.model or demo_backbone_path()
    options = {"n_threads": args.threads, "n_ctx": 1024, "progress": False}
    with RiverModel(path, **options) as reusing, RiverModel(path, **options, reuse_graphs=False) as building:
        runs = run(reusing, building, args.max_tokens, args.rounds)
    summary = summarize(runs)
    print("\n".join(table_lines(summary, args.rounds)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"arguments": vars(args), "summary": summary, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
