"""Repeated work: plain decoding, context-only drafts, the draft memory (and corpus) and
llama-cpp-python's prompt lookup on requests that repeat one another, interleaved.

    python benchmarks/repeated_work.py -m Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf -t 2 \\
        --sets extraction edits chat --river none --json out.json

See river_bench.repeated_work for the sets and what is timed. Ratios are to our
plain decoding in the same run; say the machine's load with the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from river_cpp import RiverModel
from river_cpp.engine.decisions.round_cost import DEFAULT_MAX_DRAFT

from river_bench.repeated_work import (
    SETS,
    PromptLookup,
    measure_repeated_work,
    results_json,
    results_table,
)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", required=True, help="the GGUF file")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS))
    p.add_argument("-n", "--max-tokens", type=int, default=None, help="tokens per request (default: per set)")
    p.add_argument("--max-draft", type=int, default=DEFAULT_MAX_DRAFT)
    p.add_argument("--river", default="default", help="'default' (the model's default river), 'none', or a river type")
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--no-lookup", action="store_true", help="leave out llama-cpp-python's prompt lookup")
    p.add_argument("--json", help="write the runs here")
    args = p.parse_args(argv)

    options = {} if args.river == "default" else {"river": None if args.river == "none" else args.river}
    model = RiverModel(args.model, n_ctx=args.n_ctx, n_threads=args.threads, progress=False, **options)
    lookup = None if args.no_lookup else PromptLookup(model.model_path, args.n_ctx, args.threads, args.max_draft)
    limits = {name: args.max_tokens for name in SETS} if args.max_tokens else None
    try:
        results = measure_repeated_work(
            model,
            sets=args.sets,
            max_tokens=limits,
            lookup=lookup,
            max_draft=args.max_draft,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    finally:
        if lookup is not None:
            lookup.close()
        model.close()
    print(results_table(results))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results_json(results), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
