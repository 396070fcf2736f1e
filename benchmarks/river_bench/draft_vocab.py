"""A river draft head over K token ids: the cost it saves and the tokens it cannot propose
(benchmarks/draft_vocab.py is its command line).

Cost (head_costs): one drafted token (a forward of the whole river) with its head
scoring the first K token ids (`exit_vocab`, a view of the head's first rows), against
the whole head and a plain backbone step; medians, the sizes interleaved per repetition.

Loss (coverages): the backbone's greedy tokens on prompt sets, and the share of them a
K-row head could propose at all, for four choices of the rows:
- "first": the first K ids (what `exit_vocab` computes today);
- "frequent": the K ids most frequent in a corpus that is none of the prompt sets (the
  Python standard library's sources, pydoc's topics first: text every Python install
  holds), plus the end-of-generation ids;
- "first+context", "frequent+context": those, and every token already in the context
  (a head that grows with the prompt and the output).
A token outside the rows ends a draft, so coverage c turns a per-token acceptance a
into at most a * c. The cost times the first-K view. Any other K rows of the same
type would cost the same, and the context variants would add a matmul over the
context's rows, which is not timed here.
"""

from __future__ import annotations

import glob
import sysconfig
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.model import RiverModel

from river_bench.costs import draft_cost, verify_costs

ROW_CHOICES = ("first", "frequent", "first+context", "frequent+context")

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


def head_costs(model: RiverModel, context: list[int], sizes: Sequence[int], repetitions: int) -> tuple[float, dict]:
    """(a plain backbone step's seconds, head rows K -> a drafted token's seconds) after
    `context`, the whole head (model.n_vocab rows) first; medians of three passes of
    `repetitions` timings each, every size timed once per pass."""
    cost: dict[int, list[float]] = {k: [] for k in [model.n_vocab, *sizes]}
    plain = []
    for _ in range(3):
        plain.append(verify_costs(model, context, 1, repetitions)[1])
        for k in cost:
            cost[k].append(draft_cost(model, context, k, repetitions))
    return float(np.median(plain)), {k: float(np.median(v)) for k, v in cost.items()}


def coverages(
    model: RiverModel, prompt_sets: Mapping[str, Sequence[str]], sizes: Sequence[int], max_tokens: int
) -> tuple[dict[str, dict[str, dict[int, float]]], dict[str, int], int]:
    """(prompt set -> row choice (ROW_CHOICES) -> K -> coverage, prompt set -> greedy
    tokens generated, corpus tokens counted) over the backbone's greedy continuations
    of every prompt."""
    counts = corpus_counts(model)
    end_ids = {t for t in range(model.n_vocab) if model.tokenizer.is_end_of_generation(t)}
    ranked = np.argsort(-counts, kind="stable").tolist()
    covered: dict[str, dict[str, dict[int, float]]] = {}
    generated = {}
    for name, prompts in prompt_sets.items():
        runs = []
        for prompt in prompts:
            model.reset()
            result = model.generate(prompt, max_tokens=max_tokens, policy=ExitPolicy.never(), speculative=False)
            runs.append((model.tokenize(prompt, add_bos=True, special=True), list(result.token_ids)))
        generated[name] = sum(len(o) for _, o in runs)
        covered[name] = {choice: {} for choice in ROW_CHOICES}
        for k in sizes:
            first, frequent = set(range(k)), set(ranked[:k]) | end_ids
            covered[name]["first"][k] = coverage(runs, first, False)
            covered[name]["frequent"][k] = coverage(runs, frequent, False)
            covered[name]["first+context"][k] = coverage(runs, first, True)
            covered[name]["frequent+context"][k] = coverage(runs, frequent, True)
    return covered, generated, int(counts.sum())
