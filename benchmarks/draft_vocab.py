"""A river draft head over K token ids: the cost it saves and the tokens it cannot propose.

    python benchmarks/draft_vocab.py -m MODEL.gguf -t 2 -n 96 --n-prompts 4

Cost: one drafted token (a forward of the whole river) with its head scoring the first
K token ids (`exit_vocab`, a view of the head's first rows), against the whole head and
a plain backbone step; medians, the sizes interleaved per repetition.

Loss: the backbone's greedy tokens on the three prompt sets, and the share of them a
K-row head could propose at all, for four choices of the rows:
- "first": the first K ids (what `exit_vocab` computes today);
- "frequent": the K ids most frequent in a corpus that is none of the prompt sets (the
  Python standard library's sources, pydoc's topics first: text every Python install
  holds), plus the end-of-generation ids;
- "first+context", "frequent+context": those, and every token already in the context
  (a head that grows with the prompt and the output).
A token outside the rows ends a draft, so coverage c turns a per-token acceptance a
into at most a * c. The cost column times the first-K view. Any other K rows of the
same type would cost the same, and the context variants would add a matmul over the
context's rows, which this script does not time.
"""

from __future__ import annotations

import argparse
import glob
import json
import sysconfig
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from speculative import chat_prompts, draft_cost, humaneval_prompts, verify_costs

from river_cpp import ExitPolicy, RiverModel
from river_cpp.decoding.presets import LOSSLESS

CORPUS_CHARS = 4_000_000


def corpus_counts(model: RiverModel) -> np.ndarray:
    """Token counts over the standard library's sources (pydoc's topics first)."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    files = [lib / "pydoc_data" / "topics.py"] + [Path(f) for f in sorted(glob.glob(str(lib / "*.py")))]
    counts = np.zeros(model.n_vocab, np.int64)
    read = 0
    for path in files:
        text = path.read_text(errors="ignore")
        for start in range(0, len(text), 20_000):
            np.add.at(counts, model.tokenize(text[start : start + 20_000], add_bos=False), 1)
        read += len(text)
        if read >= CORPUS_CHARS:
            break
    return counts


def coverage(runs: list[tuple[list[int], list[int]]], rows: set[int], with_context: bool) -> float:
    """Share of the output tokens a head over `rows` could propose; with_context adds
    every token seen before it."""
    hit = total = 0
    for prompt, output in runs:
        seen = set(prompt) if with_context else set()
        for token in output:
            total += 1
            hit += token in rows or token in seen
            if with_context:
                seen.add(token)
    return hit / max(total, 1)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", required=True, help="backbone GGUF")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-n", "--max-tokens", type=int, default=96, help="greedy tokens per prompt")
    p.add_argument("--n-prompts", type=int, default=4, help="prompts per set")
    p.add_argument("--sizes", type=int, nargs="+", default=[65536, 32768, 16384, 8192], help="head rows K")
    p.add_argument("-r", "--repetitions", type=int, default=15, help="timings per size")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)

    model = RiverModel(
        args.model,
        river=LOSSLESS.river,
        river_head=LOSSLESS.river_head,
        n_ctx=4096,
        n_threads=args.threads,
        progress=False,
    )
    sizes = [k for k in args.sizes if k < model.n_vocab]
    context = model.tokenize(humaneval_prompts(1)[0], add_bos=True, special=True)
    cost: dict[int, list[float]] = {k: [] for k in [model.n_vocab, *sizes]}
    plain = []
    for _ in range(3):
        plain.append(verify_costs(model, context, 1, args.repetitions)[1])
        for k in cost:
            cost[k].append(draft_cost(model, context, k, args.repetitions))
    step = float(np.median(plain))
    print(f"{Path(args.model).name}: plain backbone step {1000 * step:.2f} ms")
    for k, seconds in cost.items():
        s = float(np.median(seconds))
        print(f"  head rows {k:6d}: drafted token {1000 * s:.2f} ms = {s / step:.3f} of a plain step")

    counts = corpus_counts(model)
    end_ids = {t for t in range(model.n_vocab) if model.tokenizer.is_end_of_generation(t)}
    ranked = np.argsort(-counts, kind="stable").tolist()
    prompt_sets = {
        "humaneval": humaneval_prompts(args.n_prompts),
        "chat": chat_prompts(model, args.n_prompts, "chat_prompts.txt"),
        "grounded": chat_prompts(model, args.n_prompts, "grounded_prompts.txt"),
    }
    covered: dict[str, dict[str, dict[int, float]]] = {}
    for name, prompts in prompt_sets.items():
        runs = []
        for prompt in prompts:
            model.reset()
            result = model.generate(prompt, max_tokens=args.max_tokens, policy=ExitPolicy.never(), speculative=False)
            runs.append((model.tokenize(prompt, add_bos=True, special=True), list(result.token_ids)))
        covered[name] = {choice: {} for choice in ("first", "frequent", "first+context", "frequent+context")}
        for k in sizes:
            first, frequent = set(range(k)), set(ranked[:k]) | end_ids
            covered[name]["first"][k] = coverage(runs, first, False)
            covered[name]["frequent"][k] = coverage(runs, frequent, False)
            covered[name]["first+context"][k] = coverage(runs, first, True)
            covered[name]["frequent+context"][k] = coverage(runs, frequent, True)
        print(f"  {name} ({sum(len(o) for _, o in runs)} tokens), coverage by head rows:")
        for choice, by_size in covered[name].items():
            print(f"    {choice:17s} " + "  ".join(f"K={k}: {c:.3f}" for k, c in by_size.items()))

    if args.json:
        report = {
            "model": Path(args.model).name,
            "threads": args.threads,
            "plain_step_seconds": step,
            "draft_seconds": {k: float(np.median(v)) for k, v in cost.items()},
            "corpus_tokens": int(counts.sum()),
            "coverage": covered,
        }
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
