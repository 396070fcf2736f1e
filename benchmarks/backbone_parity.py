"""The graph and llama.cpp backbones on one file against llama-cpp-python, whole requests
(river_bench.backbone_parity).

    python benchmarks/backbone_parity.py -m MODEL.gguf [-t 2] [--prompts 4] [--tokens 128]
"""

from __future__ import annotations

import argparse
from typing import Optional, Sequence

from river_cpp.apps.cli._common import add_threads_argument

from river_bench.backbone_parity import measure, report


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", required=True)
    add_threads_argument(parser)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per set (default 4)")
    parser.add_argument("--tokens", type=int, default=128, help="most tokens an answer (default 128)")
    parser.add_argument("--sets", nargs="+", default=["grounded", "chat"], help="prompt sets (grounded, chat)")
    args = parser.parse_args(argv)
    results = measure(
        args.model, kinds=tuple(args.sets), n_prompts=args.prompts, max_tokens=args.tokens, n_threads=args.threads
    )
    print(report(results))


if __name__ == "__main__":
    main()
