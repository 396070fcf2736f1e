"""The default (RiverModel(path): the river that pays on the file, or none) against plain
decoding of the same model object, interleaved, on one prompt set; and peak memory.

    python benchmarks/fit_default.py -m MODEL.gguf --prompts chat grounded -n 64 -r 2 -t 2 --json out.json
    python benchmarks/fit_default.py -m MODEL.gguf --memory      # peak RSS: default vs plain, one answer each
    python benchmarks/fit_default.py -m MODEL.gguf --lookup-max 8  # a control: lookups of 8 tokens a round

Per prompt and round the two alternate which goes first (ABBA), so a drift of the
machine's speed falls on both. Speeds are decode tokens/s; the ratio of a set is the
mean over its prompts and rounds of default/plain, next to the ratio of the totals.
Greedy. Say the machine's load with the numbers: on a shared machine only the ratios
of interleaved runs mean anything, and where others load it heavily, the ratio of this
process's CPU seconds (prompt and decode, both threads) is the steadier one.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from statistics import mean
from typing import Optional, Sequence

from river_cpp import RiverModel, Speculative
from river_cpp._child import python_command
from river_cpp.decoding.decision import default_draft
from river_cpp.engine.compute.backbone import common_prefix

from river_bench.prompts import prompt_set

SETS = ("chat", "grounded")


def run_sets(args: argparse.Namespace) -> dict:
    """Each set's rows and summary; the JSON (--json) is rewritten after every prompt,
    so that a run stopped by a time limit keeps what it measured."""
    model = RiverModel(args.model, n_ctx=2048, n_threads=args.threads, progress=False)
    out = {
        "model": args.model,
        "river": model.river_choice.river if model.river_choice else None,
        "choice": model.river_choice.describe() if model.river_choice else "",
        "sets": {},
    }
    print(out["choice"], file=sys.stderr)
    drafted = None  # the default's own Speculative
    if args.lookup_max is not None:  # a control: the default with another max_lookup
        drafted = default_draft(model.has_river, Speculative(max_lookup=args.lookup_max))
        out["lookup_max"] = args.lookup_max
    for speculative in (False, drafted):  # builds each route's graphs before anything is timed
        model.generate("Hello", max_tokens=8, speculative=speculative)
    for name in args.prompts:
        rows = []
        sources: dict[str, list[int]] = {}
        for i, prompt in enumerate(prompt_set(model.tokenizer, name, args.n_prompts)):
            for r in range(args.rounds):
                result, cpu = {}, {}
                order = ("plain", "default") if (i + r) % 2 == 0 else ("default", "plain")
                for which in order:
                    model.reset()
                    began = time.process_time()
                    res = model.generate(
                        prompt, max_tokens=args.n_tokens, speculative=False if which == "plain" else drafted
                    )
                    cpu[which] = time.process_time() - began
                    result[which] = res
                plain, default = result["plain"], result["default"]
                n_plain, n_default = len(plain.token_ids) - 1, len(default.token_ids) - 1
                rows.append(
                    {
                        "prompt": i,
                        "round": r,
                        "plain_tps": n_plain / plain.generation_seconds,
                        "default_tps": n_default / default.generation_seconds,
                        "plain_seconds": plain.generation_seconds,
                        "default_seconds": default.generation_seconds,
                        "plain_cpu_seconds": cpu["plain"],
                        "default_cpu_seconds": cpu["default"],
                        "tokens": n_plain,
                        "identical": plain.token_ids == default.token_ids,
                        # where the two part (None: nowhere): the backbone verifies a round's
                        # drafts in one batched forward, whose logits differ from one-token
                        # steps' by float rounding (llama.cpp's own batches do the same)
                        "diverged_at": None
                        if plain.token_ids == default.token_ids
                        else common_prefix(plain.token_ids, default.token_ids),
                    }
                )
                spec = default.speculative
                if spec is not None:
                    for source, s in spec.by_source.items():
                        total = sources.setdefault(source, [0, 0, 0])
                        total[0] += s.rounds
                        total[1] += s.drafted
                        total[2] += s.accepted
                print(
                    f"{name} prompt {i} round {r}: {rows[-1]['default_tps'] / rows[-1]['plain_tps']:.3f}, "
                    f"CPU time {cpu['plain'] / cpu['default']:.3f}",
                    file=sys.stderr,
                )
                summary = out["sets"][name] = _summary(rows, sources)
                if args.json:
                    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
        print(
            f"{name}: default/plain mean {summary['mean_ratio']:.3f}, totals {summary['total_ratio']:.3f}, "
            f"CPU time {summary['cpu_ratio']:.3f}, "
            f"identical {summary['identical']} (others part at tokens {summary['diverged_at']}), "
            f"sources (rounds, drafted, accepted) {sources}"
        )
    model.close()
    return out


def _summary(rows: list[dict], sources: dict) -> dict:
    ratios = [row["default_tps"] / row["plain_tps"] for row in rows]
    return {
        "mean_ratio": mean(ratios),
        "total_ratio": sum(r["plain_seconds"] for r in rows) / sum(r["default_seconds"] for r in rows),
        # CPU seconds of this process (prompt and decode): what other processes' load
        # inflates far less than wall time
        "cpu_ratio": sum(r["plain_cpu_seconds"] for r in rows) / sum(r["default_cpu_seconds"] for r in rows),
        "ratios": ratios,
        "identical": f"{sum(r['identical'] for r in rows)}/{len(rows)}",
        "diverged_at": [r["diverged_at"] for r in rows if r["diverged_at"] is not None],
        "sources": sources,
        "rows": rows,
    }


def peak_memory(args: argparse.Namespace, which: str) -> int:
    """Peak RSS (bytes) of this process after loading `which` and one answer."""
    options = {} if which == "default" else {"river": None, "speculative": False}
    with RiverModel(args.model, n_ctx=2048, n_threads=args.threads, progress=False, **options) as model:
        model.generate(prompt_set(model.tokenizer, "chat", 1)[0], max_tokens=16)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", required=True)
    p.add_argument("--prompts", nargs="+", choices=SETS, default=["chat", "grounded"])
    p.add_argument("--n-prompts", type=int, default=4)
    p.add_argument("-n", "--n-tokens", type=int, default=64)
    p.add_argument("-r", "--rounds", type=int, default=2)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument(
        "--lookup-max",
        type=int,
        metavar="N",
        help="a control: the default's drafts with lookups of at most N tokens a round (8 before max_lookup)",
    )
    p.add_argument(
        "--memory", action="store_true", help="peak RSS of the default and of plain, each in its own process"
    )
    p.add_argument("--peak-of", choices=["default", "plain"], help=argparse.SUPPRESS)
    p.add_argument("--json")
    args = p.parse_args(argv)
    if args.peak_of:
        print(peak_memory(args, args.peak_of))
        return 0
    if args.memory:
        peaks = {}
        for which in ("default", "plain"):
            argv = ["-m", args.model, "-t", str(args.threads), "--peak-of", which]
            command = python_command("from river_bench.fit_default import main; main(sys.argv[1:])", *argv)
            peaks[which] = int(subprocess.run(command, check=True, capture_output=True, text=True).stdout.split()[-1])
        out = {"model": args.model, "peak_bytes": peaks, "ratio": peaks["default"] / peaks["plain"]}
        print(
            f"peak RSS: default {peaks['default'] / 2**20:.0f} MiB, plain {peaks['plain'] / 2**20:.0f} MiB, "
            f"{out['ratio']:.2f}x"
        )
    else:
        out = run_sets(args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
