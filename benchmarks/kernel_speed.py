"""What the matrix products cost where users feel them: prompts, plain steps and verifies.

    python benchmarks/kernel_speed.py -m MODEL.gguf -t 2 -r 3 --json out.json

Four engines on the same file, each measured in a process of its own, the processes
interleaved round after round so that a slow stretch of the machine falls on all:
- ours: the graph backbone with our own batch-invariant products (csrc/own_*) and our own
  attention, the default;
- ours, ggml's attention: the same with ggml's attention (own_attention=False);
- ours, ggml's kernels: ggml's products (RIVER_CPP_OWN_PRODUCTS=none, CPU_REPACK where the
  probe allows) and ggml's attention;
- llama-cpp-python: llama.cpp's context with its defaults (the control).

Per engine and round: a prompt of each --prompts length (one forward, the last row's
logits), --steps one-token steps after a 64-token prompt, and verifies of 4 and 8
positions (logits at each) after a 512-token prompt, rewound, against a one-token step
there (--context N: both after a prompt of N tokens, for long contexts' attention); and
the process's peak resident memory. Token ids are drawn at random from the ordinary
vocabulary: a product's cost does not depend on which tokens it multiplies.
Medians over rounds; ratios against llama-cpp-python.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from river_bench.kernel_speed import (
    ENGINES,
    STEP_CONTEXT,
    VERIFY_CONTEXT,
    child,
    measure,
    report,
    summarize,
)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", required=True, help="GGUF file")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-r", "--rounds", type=int, default=3)
    p.add_argument("--prompts", type=int, nargs="+", default=[512, 2048], help="prompt lengths")
    p.add_argument("--steps", type=int, default=32, help="one-token steps timed")
    p.add_argument(
        "--context",
        type=int,
        metavar="N",
        help="time steps and verifies after a prompt of N tokens (default: steps after 64, verifies after 512)",
    )
    p.add_argument("--engines", nargs="+", choices=list(ENGINES), default=list(ENGINES))
    p.add_argument("--json", help="write the results here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.model, args.threads, args.prompts, args.steps, args.context)))
        return 0

    load_before = os.getloadavg()[0]
    rounds: dict[str, list[dict]] = {engine: [] for engine in args.engines}
    for _ in range(args.rounds):
        for engine in args.engines:
            rounds[engine].append(child(os.path.abspath(__file__), args, engine))
    load_after = os.getloadavg()[0]
    summary = summarize(rounds, args.prompts)
    print(report(summary))
    step_context, verify_context = (args.context or STEP_CONTEXT), (args.context or VERIFY_CONTEXT)
    print(f"steps after {step_context} cached positions, verifies after {verify_context}")
    print(f"load average (1 min) before {load_before:.2f}, after {load_after:.2f}")
    if args.json:
        document = {
            "model": Path(args.model).name,
            "threads": args.threads,
            "rounds": args.rounds,
            "context": {"step": step_context, "verify": verify_context},
            "load": [load_before, load_after],
            "summary": summary,
        }
        Path(args.json).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
