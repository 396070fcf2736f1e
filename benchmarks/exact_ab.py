"""Exact rows, A/B by mode (river_bench.exact_ab): the default's and plain
decoding's speed, and identical answers, with exact="off" (ggml's kernels by batch
size, as before issue 40), "on" (the default) and "bitwise", interleaved prompt by prompt.

    python benchmarks/exact_ab.py -m MODEL.gguf [-t 2] [--prompts 16] [--chat-prompts 10] [--tokens 256] [--control]
        [--temperature 0.8 --seed 7]

On a quiet machine only (`uptime`); --json writes the summaries.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional, Sequence

from river_cpp.apps.cli._common import add_threads_argument

from river_bench.exact_ab import MODES, PROMPTS, run


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", required=True, metavar="PATH", help="backbone GGUF")
    add_threads_argument(parser)
    parser.add_argument("--prompts", type=int, default=PROMPTS["grounded"], help="input-grounded prompts (16)")
    parser.add_argument("--chat-prompts", type=int, default=PROMPTS["chat"], help="chat prompts (10)")
    parser.add_argument("--tokens", type=int, default=256, help="most tokens per answer (256)")
    parser.add_argument("--modes", default=",".join(MODES), help="exact modes (off,on,bitwise)")
    parser.add_argument(
        "--control", action="store_true", help="run plain again after the default: the decode ratios' noise (A/A)"
    )
    parser.add_argument(
        "--temperature", type=float, default=0.0, help="sample at this temperature, top_p 0.95 (default 0: greedy)"
    )
    parser.add_argument("--seed", type=int, default=7, help="the sampling seed of every call (with --temperature)")
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args(argv)
    runs = run(
        args.model,
        modes=args.modes.split(","),
        prompts={"grounded": args.prompts, "chat": args.chat_prompts},
        max_tokens=args.tokens,
        n_threads=args.threads,
        control=args.control,
        sampling={"temperature": args.temperature, "top_p": 0.95, "seed": args.seed} if args.temperature > 0 else None,
    )
    summaries = [r.summary() for r in runs]
    for s in summaries:
        print(
            f"{s['kind']:9s} exact={s['mode']:8s} identical {s['identical']:>6s}  plain {s['plain_tokens_per_s']:6.2f} "
            f"tok/s  default {s['default_tokens_per_s']:6.2f} tok/s  ({s['default_over_plain']:.2f}x)  "
            f"decode {s['decode_over_plain']:.2f}x (worst {s['worst_decode_over_plain']:.2f}x)"
            + (
                f"  A/A plain {min(s['control_ratios']):.2f}-{max(s['control_ratios']):.2f}x"
                if s["control_ratios"]
                else ""
            )
        )
    if args.json:
        # the model's file name only: a JSON that lands in docs/results names no machine's folders
        arguments = {**vars(args), "model": Path(args.model).name, "json": None}
        with open(args.json, "w") as f:
            json.dump({"arguments": arguments, "summaries": summaries}, f, indent=1)


if __name__ == "__main__":
    main()
