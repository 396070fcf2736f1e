"""A q8_0 KV cache against F16 on long inputs: the cache's bytes and the mean KL divergence
of every position's next-token distribution, ours beside llama-cpp-python's same option
(river_bench.kv_quant: the inputs, what is compared, what the columns mean).

    python benchmarks/kv_quant.py -m MODEL.gguf -t 2 [--sides ours llama] [--max-positions N] [--json out.json]

A quick check on a small model: --max-positions 256. Each side holds two models of the
file at once (F16 and q8_0), so memory is twice one model's cache and compute buffers.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
from pathlib import Path
from typing import Optional, Sequence

from river_cpp.apps.cli._common import add_threads_argument

from river_bench import kv_quant, options
from river_bench.whole_requests import chat_ids


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_model_argument(p, help="GGUF model (the issue's figures: the 1.5B Q4_K_M release)")
    add_threads_argument(p)
    p.add_argument("--sides", nargs="+", choices=kv_quant.SIDES, default=list(kv_quant.SIDES))
    p.add_argument(
        "--max-positions",
        type=int,
        default=0,
        metavar="N",
        help="read each document's first N positions only (default 0: every position)",
    )
    p.add_argument(
        "--n-ctx", type=int, default=4096, help="each model's context (default 4096: the longest document fits)"
    )
    p.add_argument("--json", type=Path, help="write every side's figures here")
    args = p.parse_args(argv)

    from river_cpp.engine._ggml import set_ggml_verbosity
    from river_cpp.engine.compute.tokenizer import Tokenizer

    set_ggml_verbosity(False)
    inputs = kv_quant.documents(functools.partial(chat_ids, Tokenizer(os.fspath(args.model))), args.max_positions)
    results = {}
    for name in args.sides:
        side = kv_quant.open_side(name, args.model, n_ctx=args.n_ctx, n_threads=args.threads)
        try:
            results[name] = kv_quant.measure(side, inputs, progress=lambda line, n=name: print(f"{n} {line}"))
        finally:
            side.close()
    print(kv_quant.report(results, n_ctx=args.n_ctx))
    if args.json:
        figures = {
            name: {**dataclasses.asdict(r), "mean_kl": r.mean_kl, "top1_agreement": r.top1_agreement}
            for name, r in results.items()
        }
        args.json.write_text(json.dumps({"n_ctx": args.n_ctx, "sides": figures}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
