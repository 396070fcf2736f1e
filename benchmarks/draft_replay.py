"""Replay the adaptive draft length on recorded acceptance, with measured costs
(river_bench.draft_replay: what a trace holds, and how the replay runs the
loop's own round controller on it).

    python benchmarks/draft_replay.py -m BACKBONE.gguf --river q4_0 --prompts chat \\
        -n 128 -t 2 --trace trace.json          # record (runs the models)
    python benchmarks/draft_replay.py --trace trace.json --replays 20   # replay only

Prints tokens/s relative to plain decoding, the adaptive length's (each replay's mean,
min and max) and every fixed length's. `--drafts` replays the portfolio (n-gram
offers beside the river), `--p-min` Speculative.p_min (once per value given).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional, Sequence

from river_cpp.apps.cli._common import add_threads_argument
from river_cpp.decoding.ngram import DEFAULT_NGRAM_MAX, DEFAULT_NGRAM_MIN
from river_cpp.decoding.speculative_options import DEFAULT_P_MIN, DRAFTS

from river_bench import draft_replay, options


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_model_argument(p, required=False, help="backbone GGUF: record a trace (without it, replay --trace)")
    p.add_argument("--river", default="q4_0", help="the river type recorded; 'none': tokens and timings only")
    p.add_argument("--head", default="q4_0", help="the river's LM head type (default q4_0)")
    options.add_prompts_argument(p)
    options.add_tokens_argument(p)
    add_threads_argument(p)
    p.add_argument("--max-run", type=int, default=16, help="longest accepted run recorded per position")
    p.add_argument("--trace", required=True, help="trace JSON: written when recording, read when replaying")
    p.add_argument("--replays", type=int, default=20)
    p.add_argument("--max-draft", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--verify-ratios",
        type=float,
        nargs="+",
        default=[],
        metavar="R",
        help="replay with this verify curve instead of the recorded one: V(n)/V(1) for n = 2, 3, ... "
        "(the last one extends to longer verifies)",
    )
    p.add_argument(
        "--drafts",
        choices=DRAFTS,
        default="river",
        help="the sources the adaptive replay offers (n-gram offers need a trace with tokens)",
    )
    p.add_argument("--ngram-min", type=int, default=DEFAULT_NGRAM_MIN)
    p.add_argument("--ngram-max", type=int, default=DEFAULT_NGRAM_MAX)
    p.add_argument(
        "--p-min",
        type=float,
        nargs="+",
        default=[DEFAULT_P_MIN],
        metavar="P",
        help="replay with each of these Speculative.p_min values: a river round ends after a token whose "
        "top probability is lower (0: never)",
    )
    args = p.parse_args(argv)

    if args.model:
        trace = draft_replay.record_trace(
            args.model,
            river=None if args.river == "none" else args.river,
            head=args.head,
            prompts=args.prompts,
            n_prompts=args.n_prompts,
            n_tokens=args.max_tokens,
            threads=args.threads,
            max_run=args.max_run,
            chain=args.max_draft,
        )
        Path(args.trace).write_text(json.dumps(trace))
    trace = json.loads(Path(args.trace).read_text())
    print(f"{trace['model']} {trace['river']} river ({trace['prompts_kind']}), {len(trace['prompts'])} prompts")
    for p_min in args.p_min:
        result = draft_replay.summarize(
            trace,
            args.replays,
            args.max_draft,
            args.seed,
            args.verify_ratios,
            args.drafts,
            (args.ngram_min, args.ngram_max),
            p_min,
        )
        print(f"  p_min {p_min}:")
        print("\n".join(draft_replay.summary_lines(result, args.drafts)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
