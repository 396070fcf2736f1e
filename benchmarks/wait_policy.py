"""Plain decode speed under each OpenMP wait policy, idle and beside a busy process
(river_bench.wait_policy: what runs and why each run is a fresh process).

    python benchmarks/wait_policy.py -m MODEL.gguf -t 2 -r 3 --busy 1 --json out.json

The machine must be otherwise idle: the loaded runs bring their own load.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Optional, Sequence

from river_cpp.apps.cli._common import add_threads_argument

from river_bench import options, wait_policy


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_model_argument(p, help="GGUF model")
    add_threads_argument(p)
    p.add_argument("-r", "--repetitions", type=int, default=3)
    p.add_argument("-n", "--tokens", type=int, default=64, help="tokens decoded per run")
    p.add_argument("--busy", type=int, default=1, help="spinning processes beside the loaded runs")
    p.add_argument("--policies", nargs="+", choices=list(wait_policy.POLICIES))
    p.add_argument("--no-llama", action="store_true", help="leave out llama-cpp-python's default")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    results = wait_policy.measure(
        args.model,
        n_threads=args.threads,
        n_tokens=args.tokens,
        repetitions=args.repetitions,
        busy=args.busy,
        policies=args.policies,
        llama_peer=not args.no_llama,
    )
    base = statistics.median(results["runtime-default"]["idle"]) if "runtime-default" in results else None
    print("| policy | idle t/s | loaded t/s | loaded / idle | idle vs runtime default |")
    print("|---|---:|---:|---:|---:|")
    for name, runs in results.items():
        idle, loaded = statistics.median(runs["idle"]), statistics.median(runs["loaded"])
        versus = f"{idle / base:.3f}" if base else "-"
        print(f"| {name} | {idle:.2f} | {loaded:.2f} | {loaded / idle:.2f} | {versus} |")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
