"""Whole requests on long real inputs against llama-cpp-python: time to first token,
whole-request time and decode tokens/s (river_bench.whole_requests: the task set,
the alternating app, what each column means).

    python benchmarks/whole_requests.py -m MODEL.gguf -t 2 --workload tasks alternate \\
        --configs plain default llama llama-ram --json out.json

Say the machine's load with the numbers (`uptime` before and after).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from river_cpp.apps.cli._common import add_threads_argument

from river_bench import options, whole_requests


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_model_argument(p, help="GGUF model (the issue's figures: the 1.5B Q4_K_M release)")
    add_threads_argument(p)
    p.add_argument(
        "--workload",
        nargs="+",
        choices=whole_requests.WORKLOADS,
        default=list(whole_requests.DEFAULT_WORKLOADS),
        help="tasks, alternate and disk by default; long: documents of about 4k and 8k tokens (n-ctx 10240)",
    )
    p.add_argument(
        "--configs",
        nargs="+",
        choices=whole_requests.CONFIGS,
        default=["plain", "default", "llama"],
        help="configurations (llama-ram runs in the alternate workload only)",
    )
    p.add_argument("--tasks", nargs="+", metavar="NAME", help="only these tasks of the long-input set")
    p.add_argument("--max-tokens", type=int, metavar="N", help="cap every request's tokens at N (a quick check)")
    p.add_argument(
        "--prompt-cache",
        type=int,
        default=2 << 30,
        metavar="BYTES",
        help="our models' prompt cache in the alternate workload (RAM bytes; 0: none); tasks always run without",
    )
    p.add_argument("--n-ctx", type=int, help="context (default 4096; 10240 with the long workload)")
    p.add_argument("--json", type=Path, help="write the summaries and every request's timings here")
    args = p.parse_args(argv)
    if args.n_ctx is None:
        args.n_ctx = whole_requests.LONG_N_CTX if "long" in args.workload else 4096

    configs = whole_requests.open_configs(args.model, args.configs, n_ctx=args.n_ctx, n_threads=args.threads)
    from river_cpp.engine._ggml import set_ggml_verbosity
    from river_cpp.engine.compute.tokenizer import Tokenizer

    set_ggml_verbosity(False)
    tokenizer = Tokenizer(os.fspath(args.model))

    tokenize_chat = functools.partial(whole_requests.chat_ids, tokenizer)

    report = {"model": Path(args.model).name, "n_threads": args.threads, "load_average": os.getloadavg()[0]}
    try:
        for workload in args.workload:
            print(f"## {workload}")
            if workload in ("tasks", "long"):
                _, chosen = whole_requests.load_set(key="long_tasks" if workload == "long" else "tasks")
                if args.tasks:
                    chosen = [t for t in chosen if t.name in args.tasks]
                if args.max_tokens:
                    chosen = [dataclasses.replace(t, max_tokens=min(t.max_tokens, args.max_tokens)) for t in chosen]
                runs = {name: c for name, c in configs.items() if name != "llama-ram"}
                for config in runs.values():
                    if hasattr(config, "model"):
                        config.model.prompt_cache = None
                results = whole_requests.run_tasks(runs, tokenize_chat, tasks=chosen)
            elif workload == "alternate":
                for config in configs.values():
                    if hasattr(config, "model"):
                        config.model.prompt_cache = args.prompt_cache or None
                results = whole_requests.run_alternate(configs, tokenize_chat, max_tokens=args.max_tokens or 128)
            else:
                with tempfile.TemporaryDirectory() as folder:
                    results = whole_requests.run_disk(
                        args.model, tokenize_chat, Path(folder), n_ctx=args.n_ctx, n_threads=args.threads
                    )
            rows = whole_requests.summary(results)
            print("\n".join(whole_requests.table_lines(rows)))
            report[workload] = rows
    finally:
        for config in configs.values():
            closer = getattr(getattr(config, "model", None), "close", None)
            if closer is not None:
                closer()
    report["load_average_after"] = os.getloadavg()[0]
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
