"""The measurements behind benchmarks/kernel_speed.py: prompts, plain steps and verifies of
one engine in one process, and their medians over rounds."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

# Each engine: the environment its process runs in, and RiverModel's load options.
ENGINES = {
    "ours": ({"RIVER_CPP_OWN_PRODUCTS": "auto"}, {}),
    "ours, ggml's attention": ({"RIVER_CPP_OWN_PRODUCTS": "auto"}, {"own_attention": False}),
    "ours, ggml's kernels": ({"RIVER_CPP_OWN_PRODUCTS": "none"}, {"own_attention": False}),
    "llama-cpp-python": ({}, {}),
}
VERIFY_SIZES = (1, 4, 8)
STEP_CONTEXT = 64  # cached positions steps are timed after, unless --context says
VERIFY_CONTEXT = 512  # ... and verifies


def measure(
    engine: str, model: str, threads: int, prompts: Sequence[int], steps: int, context: Optional[int] = None
) -> dict:
    """One round of one engine, in this process. Steps follow a prompt of `context`
    tokens (default STEP_CONTEXT) and verifies one of `context` too (default VERIFY_CONTEXT)."""
    from river_cpp.measure.llama_peer import LlamaCppPeer
    from river_cpp.model import RiverModel

    step_context, verify_context = context or STEP_CONTEXT, context or VERIFY_CONTEXT
    n_ctx = max(max(prompts), step_context + steps, verify_context + max(VERIFY_SIZES)) + 64
    if engine == "llama-cpp-python":
        backbone = LlamaCppPeer(Path(model), n_ctx=n_ctx, n_threads=threads)
    else:
        options = ENGINES[engine][1]
        backbone = RiverModel(
            model, river=None, n_ctx=n_ctx, n_threads=threads, progress=False, speculative=False, **options
        )
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

    def after_prompt(n: int) -> int:
        """The cache holding ids[:n] (a long prompt just timed is kept, not fed again)."""
        if backbone.n_past != n:
            backbone.reset()
            timed(ids[:n], "prompt")
        return backbone.n_past

    result: dict = {"prompt_s": {}, "context": {"step": step_context, "verify": verify_context}}
    for n in prompts:
        backbone.reset()
        result["prompt_s"][n] = timed(ids[:n], "prompt")
    base = after_prompt(step_context)
    result["step_s"] = float(np.median([timed(ids[base + i : base + i + 1], "step") for i in range(steps)]))
    backbone.rewind(base)
    base = after_prompt(verify_context)
    result["verify_s"] = {}
    for n in VERIFY_SIZES:
        times = []
        for _ in range(3):
            times.append(timed(ids[base : base + n], "verify"))
            backbone.rewind(base)
        result["verify_s"][n] = float(np.median(times))
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def child(script: str, args: argparse.Namespace, engine: str) -> dict:
    """One round of `engine` in a process of its own: `script` run with --child."""
    env = {**os.environ, **ENGINES[engine][0]}
    command = [sys.executable, script, "--child", engine, "-m", args.model, "-t", str(args.threads)]
    command += ["--steps", str(args.steps), "--prompts", *map(str, args.prompts)]
    command += ["--context", str(args.context)] if args.context else []
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarize(rounds: dict[str, list[dict]], prompts: Sequence[int]) -> dict[str, dict]:
    """Medians over rounds per engine: tokens/s of prompts and steps, verify ms, peak RSS."""
    summary: dict[str, dict] = {}
    for engine, runs in rounds.items():
        summary[engine] = {
            "prompt_tokens_per_s": {n: n / float(np.median([r["prompt_s"][str(n)] for r in runs])) for n in prompts},
            "step_tokens_per_s": 1.0 / float(np.median([r["step_s"] for r in runs])),
            "verify_ms": {n: 1e3 * float(np.median([r["verify_s"][str(n)] for r in runs])) for n in VERIFY_SIZES},
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
        }
    return summary


def report(summary: dict[str, dict]) -> str:
    """One line per engine, ratios against llama-cpp-python where it ran."""
    control = summary.get("llama-cpp-python")
    lines = []
    for engine, s in summary.items():
        prompts = "  ".join(
            f"pp{n} {v:6.1f} t/s" + (f" ({v / control['prompt_tokens_per_s'][n]:.2f}x)" if control else "")
            for n, v in s["prompt_tokens_per_s"].items()
        )
        step = s["step_tokens_per_s"]
        step_ratio = f" ({step / control['step_tokens_per_s']:.2f}x)" if control else ""
        verify = " ".join(f"V({n}) {ms:.1f} ms" for n, ms in s["verify_ms"].items())
        lines.append(
            f"{engine:22} {prompts}  step {step:5.1f} t/s{step_ratio}  {verify}  peak RSS {s['peak_rss_mib']:.0f} MiB"
        )
    return "\n".join(lines)
