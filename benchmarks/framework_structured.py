"""One structured-output flow through instructor and one through outlines, whole calls,
river_cpp.Llama (the default: drafted where a draft pays) against llama_cpp.Llama on
the same file and thread count, greedy. Needs the [compat] extra.

    python benchmarks/framework_structured.py MODEL.gguf [MODEL.gguf ...] [-t 2] [-r 3]

instructor's JSON_SCHEMA mode sends OpenAI's json_schema response_format; llama-cpp-
python 0.3.36 does not constrain by that form, so its calls are sent its own form of
the same schema ({"type": "json_object", "schema": ...}): both engines then decode
under the same grammar. outlines runs its logits processor on each step, so river-cpp
decodes those calls plainly (no drafts). Each row: the median whole-call time of r
repetitions after one warm-up call, and whether the two engines' texts are equal.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

import llama_cpp.llama

import river_cpp

from river_bench.framework_structured import PROMPTS, instructor_flow, outlines_flow, timed


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("-r", "--repetitions", type=int, default=3, choices=range(1, len(PROMPTS)))
    parser.add_argument("--n-ctx", type=int, default=2048)
    args = parser.parse_args(argv)
    print("| model | flow | llama-cpp-python s | river-cpp s | speedup | same text (calls) |")
    print("|---|---|---:|---:|---:|---|")
    for path in args.models:
        options = dict(model_path=path, n_ctx=args.n_ctx, n_threads=args.threads, verbose=False)
        reference = llama_cpp.llama.Llama(**options)
        ours = river_cpp.Llama(**options)
        flows = {
            "instructor": (instructor_flow(reference, translate=True), instructor_flow(ours, translate=False)),
            "outlines": (outlines_flow(reference), outlines_flow(ours)),
        }
        for name, (theirs, mine) in flows.items():
            their_s, their_texts = timed(theirs, args.repetitions)
            my_s, my_texts = timed(mine, args.repetitions)
            same = sum(a == b for a, b in zip(their_texts, my_texts))
            print(
                f"| {os.path.basename(path)} | {name} | {their_s:.2f} | {my_s:.2f} | "
                f"{their_s / my_s:.2f}x | {same}/{len(my_texts)} |",
                flush=True,
            )
            for a, b in zip(their_texts, my_texts):
                if a != b:
                    print(f"  differs: llama-cpp-python {a!r}\n           river-cpp        {b!r}", file=sys.stderr)
        ours.close()
        reference.close()


if __name__ == "__main__":
    main()
