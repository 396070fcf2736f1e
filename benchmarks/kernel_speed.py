"""What the matrix products cost where users feel them: prompts, plain steps and verifies.

    python benchmarks/kernel_speed.py -m MODEL.gguf -t 2 -r 3 --json out.json

Three engines on the same file, each measured in a process of its own, the processes
interleaved round after round so that a slow stretch of the machine falls on all:
- ours: the graph backbone with our own batch-invariant products (csrc/own_*), the default;
- ours, ggml's kernels: the same with RIVER_CPP_OWN_PRODUCTS=none (CPU_REPACK where the probe allows);
- llama-cpp-python: llama.cpp's context with its defaults (the control).

Per engine and round: a prompt of each --prompts length (one forward, the last row's
logits), --steps one-token steps after a 64-token prompt, and verifies of 4 and 8
positions (logits at each) after a 512-token prompt, rewound, against a one-token step
there. Token ids are drawn at random from the ordinary vocabulary: a product's cost does
not depend on which tokens it multiplies. Medians over rounds; ratios against
llama-cpp-python.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

ENGINES = {
    "ours": {"RIVER_CPP_OWN_PRODUCTS": "auto"},
    "ours, ggml's kernels": {"RIVER_CPP_OWN_PRODUCTS": "none"},
    "llama-cpp-python": {},
}
VERIFY_SIZES = (1, 4, 8)
VERIFY_CONTEXT = 512


def measure(engine: str, model: str, threads: int, prompts: Sequence[int], steps: int) -> dict:
    """One round of one engine, in this process."""
    from river_cpp.measure.llama_peer import LlamaCppPeer
    from river_cpp.model import RiverModel

    n_ctx = max(max(prompts), VERIFY_CONTEXT + 16) + 64
    if engine == "llama-cpp-python":
        backbone = LlamaCppPeer(Path(model), n_ctx=n_ctx, n_threads=threads)
    else:
        backbone = RiverModel(model, river=None, n_ctx=n_ctx, n_threads=threads, progress=False, speculative=False)
    ids = [int(i) for i in np.random.default_rng(0).integers(1000, 20000, size=n_ctx)]

    def timed(tokens: Sequence[int], kind: str) -> float:
        # as decoding calls it (river_cpp.decoding.steps): a prompt and a step want the
        # last row's logits, a verify every row's
        start = time.perf_counter()
        if kind == "prompt":
            backbone.forward(list(tokens), last_only=True, route="prompt", prompt=True)
        else:
            backbone.forward(list(tokens), last_only=kind == "step", route="backbone")
        return time.perf_counter() - start

    result: dict = {"prompt_s": {}}
    for n in prompts:
        backbone.reset()
        result["prompt_s"][n] = timed(ids[:n], "prompt")
    backbone.reset()
    timed(ids[:64], "prompt")
    result["step_s"] = float(np.median([timed(ids[64 + i : 65 + i], "step") for i in range(steps)]))
    backbone.reset()
    timed(ids[:VERIFY_CONTEXT], "prompt")
    base = backbone.n_past
    result["verify_s"] = {}
    for n in VERIFY_SIZES:
        times = []
        for _ in range(3):
            times.append(timed(ids[base : base + n], "verify"))
            backbone.rewind(base)
        result["verify_s"][n] = float(np.median(times))
    return result


def child(args: argparse.Namespace, engine: str) -> dict:
    env = {**os.environ, **ENGINES[engine]}
    command = [sys.executable, __file__, "--child", engine, "-m", args.model, "-t", str(args.threads)]
    command += ["--steps", str(args.steps), "--prompts", *map(str, args.prompts)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", required=True, help="GGUF file")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-r", "--rounds", type=int, default=3)
    p.add_argument("--prompts", type=int, nargs="+", default=[512, 2048], help="prompt lengths")
    p.add_argument("--steps", type=int, default=32, help="one-token steps timed")
    p.add_argument("--engines", nargs="+", choices=list(ENGINES), default=list(ENGINES))
    p.add_argument("--json", help="write the results here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.model, args.threads, args.prompts, args.steps)))
        return 0

    load_before = os.getloadavg()[0]
    rounds: dict[str, list[dict]] = {engine: [] for engine in args.engines}
    for _ in range(args.rounds):
        for engine in args.engines:
            rounds[engine].append(child(args, engine))
    load_after = os.getloadavg()[0]

    summary: dict[str, dict] = {}
    for engine, runs in rounds.items():
        summary[engine] = {
            "prompt_tokens_per_s": {
                n: n / float(np.median([r["prompt_s"][str(n)] for r in runs])) for n in args.prompts
            },
            "step_tokens_per_s": 1.0 / float(np.median([r["step_s"] for r in runs])),
            "verify_ms": {n: 1e3 * float(np.median([r["verify_s"][str(n)] for r in runs])) for n in VERIFY_SIZES},
        }
    control = summary.get("llama-cpp-python")
    for engine, s in summary.items():
        prompts = "  ".join(
            f"pp{n} {v:6.1f} t/s" + (f" ({v / control['prompt_tokens_per_s'][n]:.2f}x)" if control else "")
            for n, v in s["prompt_tokens_per_s"].items()
        )
        step = s["step_tokens_per_s"]
        step_ratio = f" ({step / control['step_tokens_per_s']:.2f}x)" if control else ""
        verify = " ".join(f"V({n}) {ms:.1f} ms" for n, ms in s["verify_ms"].items())
        print(f"{engine:22} {prompts}  step {step:5.1f} t/s{step_ratio}  {verify}")
    print(f"load average (1 min) before {load_before:.2f}, after {load_after:.2f}")
    if args.json:
        document = {
            "model": Path(args.model).name,
            "threads": args.threads,
            "rounds": args.rounds,
            "load": [load_before, load_after],
            "summary": summary,
        }
        Path(args.json).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
