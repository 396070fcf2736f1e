"""A river draft head over K token ids: the cost it saves and the tokens it cannot propose
(river_bench.draft_vocab: the row choices and what the cost covers).

    python benchmarks/draft_vocab.py -m MODEL.gguf -t 2 -n 96 --n-prompts 4

Prints a drafted token's cost per head size K against a plain backbone step, then per
prompt set (HumanEval, chat, input-grounded) the share of the backbone's greedy tokens
a K-row head could propose, for each choice of the rows.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional, Sequence

from river_cpp.apps.cli._common import add_threads_argument
from river_cpp.decoding.presets import LOSSLESS
from river_cpp.engine.files.river import DEFAULT_RIVER_TYPE
from river_cpp.model import RiverModel

from river_bench.draft_vocab import coverages, head_costs
from river_bench.options import DEFAULT_N_PROMPTS, add_model_argument, add_tokens_argument
from river_bench.prompts import prompt_set


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(p)
    add_threads_argument(p)
    add_tokens_argument(p, default=96, help="greedy tokens per prompt")
    p.add_argument("--n-prompts", type=int, default=DEFAULT_N_PROMPTS, help="prompts per set")
    p.add_argument("--sizes", type=int, nargs="+", default=[65536, 32768, 16384, 8192], help="head rows K")
    p.add_argument("-r", "--repetitions", type=int, default=15, help="timings per size")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)

    model = RiverModel(
        args.model,
        river=DEFAULT_RIVER_TYPE,
        river_head=LOSSLESS.river_head,
        n_ctx=4096,
        n_threads=args.threads,
        progress=False,
    )
    sizes = [k for k in args.sizes if k < model.n_vocab]
    context = model.tokenize(prompt_set(model.tokenizer, "humaneval", 1)[0], add_bos=True, special=True)
    step, cost = head_costs(model, context, sizes, args.repetitions)
    print(f"{Path(args.model).name}: plain backbone step {1000 * step:.2f} ms")
    for k, s in cost.items():
        print(f"  head rows {k:6d}: drafted token {1000 * s:.2f} ms = {s / step:.3f} of a plain step")

    sets = {name: prompt_set(model.tokenizer, name, args.n_prompts) for name in ("humaneval", "chat", "grounded")}
    covered, generated, corpus_tokens = coverages(model, sets, sizes, args.max_tokens)
    for name, by_choice in covered.items():
        print(f"  {name} ({generated[name]} tokens), coverage by head rows:")
        for choice, by_size in by_choice.items():
            print(f"    {choice:17s} " + "  ".join(f"K={k}: {c:.3f}" for k, c in by_size.items()))

    if args.json:
        report = {
            "model": Path(args.model).name,
            "threads": args.threads,
            "plain_step_seconds": step,
            "draft_seconds": cost,
            "corpus_tokens": corpus_tokens,
            "coverage": covered,
        }
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
