"""Several clients on one server: `river-cpp serve --parallel N` against one request at
a time (--parallel 1) and against llama-cpp-python's server, on the same file.

    python benchmarks/parallel_serving.py -m MODEL.gguf -t 2 -r 2 \
        --llama-python PYTHON_WITH_llama_cpp_server --json out.json

Every server is its own process, all loaded at once and exercised in turn, round after
round (river_bench.parallel_serving). Throughput: --clients concurrent clients, chat
prompts, --max-tokens greedy tokens each, aggregate tokens/s. Waiting: a short request
(about 40 prompt tokens, 16 out) sent while a --long-tokens answer streams: its time
to first token against the idle server's, and the long stream's tokens/s while they
share against before. Medians over rounds; the control is llama-cpp-python's server
(its Python needs llama-cpp-python[server]; leave --llama-python out to skip it).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Optional, Sequence

from river_bench.parallel_serving import report, run, summarize


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", required=True, help="GGUF file")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-r", "--rounds", type=int, default=2)
    p.add_argument("--parallel", type=int, nargs="+", default=[1, 4], help="river-cpp servers' --parallel (1 first)")
    p.add_argument("--llama-python", help="a Python with llama-cpp-python[server]: its server is the control")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--requests", type=int, default=2, help="requests per client per round")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--long-tokens", type=int, default=512)
    p.add_argument("--short-tokens", type=int, default=16)
    p.add_argument("--settle", type=float, default=3.0, help="seconds the long stream runs alone first")
    p.add_argument("--n-ctx", type=int, default=2048, help="positions per request")
    p.add_argument("--logs", default="parallel_serving_logs", help="folder for the servers' logs")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    load_before = os.getloadavg()[0]
    document = run(
        args.model,
        threads=args.threads,
        parallel=args.parallel,
        llama_python=args.llama_python,
        rounds=args.rounds,
        clients=args.clients,
        requests=args.requests,
        max_tokens=args.max_tokens,
        long_tokens=args.long_tokens,
        short_tokens=args.short_tokens,
        settle_s=args.settle,
        n_ctx=args.n_ctx,
        log_folder=Path(args.logs),
    )
    names = list(document["results"])
    control = "llama-cpp-python server" if args.llama_python else None
    summary = summarize(document["results"], names[0], control)
    print(report(summary))
    load_after = os.getloadavg()[0]
    print(f"load average (1 min) before {load_before:.2f}, after {load_after:.2f}")
    if args.json:
        document.update(summary=summary, load=[load_before, load_after], arguments=vars(args))
        Path(args.json).write_text(json.dumps(document, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
