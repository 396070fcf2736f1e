"""What a forward costs: a backbone verify of n positions, a drafted river token, and
the speed lossless decoding could reach from those costs.

Timed the same way for the lossless benchmark (river_bench.lossless), the draft
replay's traces (river_bench.draft_replay), the draft head's cost
(river_bench.draft_vocab) and the verify curve against llama.cpp
(verify_curves): medians of single timings, the cache rewound after each.
"""

from __future__ import annotations

import functools
import time
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from river_cpp.engine.compute.backbone import Backbone
from river_cpp.engine.compute.policy import ExitPolicy


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median seconds of fn() over repeats."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def verify_costs(model: Backbone, context: list[int], max_n: int, repeats: int) -> dict[int, float]:
    """Seconds of one backbone forward of n positions after `context`, n = 1..max_n."""
    model.reset()
    model.forward(context, route="backbone")
    base = model.n_past
    ids = context[1 : max_n + 1]

    def verify(n: int) -> None:
        model.forward(ids[:n], route="backbone")
        model.rewind(base)

    return {n: median_seconds(functools.partial(verify, n), repeats) for n in range(1, max_n + 1)}


def draft_cost(model: Backbone, context: list[int], vocab: Optional[int], repeats: int) -> float:
    """Seconds of one drafted token: a single-token forward on the whole river, its
    head scoring the first `vocab` token ids (None: all)."""
    model.reset()
    model.forward(context, route="backbone")
    base = model.n_past

    def draft() -> None:
        model.forward(context[:1], last_only=True, route="decode", policy=ExitPolicy.at_layer(0), exit_vocab=vocab)
        model.rewind(base)

    return median_seconds(draft, repeats)


def verify_curves(
    engines: Mapping[str, Backbone], context: Sequence[int], max_n: int, repetitions: int
) -> dict[str, dict[int, float]]:
    """Each engine's median seconds of a forward of n positions after `context` (logits
    at every one), n = 1..max_n, the engines interleaved per repetition so that a
    slow stretch of the machine falls on all of them."""
    sizes = range(1, max_n + 1)
    seconds: dict[str, dict[int, list[float]]] = {name: {n: [] for n in sizes} for name in engines}
    bases = {}
    for name, model in engines.items():
        model.reset()
        model.forward(list(context), route="backbone")
        bases[name] = model.n_past
    for _ in range(repetitions):
        for name, model in engines.items():
            for n in sizes:
                start = time.perf_counter()
                model.forward(list(context[1 : 1 + n]), route="backbone")
                seconds[name][n].append(time.perf_counter() - start)
                model.rewind(bases[name])
    return {name: {n: float(np.median(t)) for n, t in times.items()} for name, times in seconds.items()}


def ceiling(draft: float, verify: Mapping[int, float]) -> tuple[float, int]:
    """(speed, k): the speed relative to plain decoding of rounds that draft k tokens
    and keep them all, at the best k among the measured verify sizes: k + 1 tokens for
    k drafts and a verify of k + 1 positions. `draft` (one drafted token) and
    `verify` (n -> a verify of n positions) are in plain decoding steps.

    >>> ceiling(0.5, {2: 1.5, 3: 1.75, 5: 2.0})  # k = 4: 5 tokens for 2 + 2 steps
    (1.25, 4)
    """
    return max(((k + 1) / (k * draft + verify[k + 1]), k) for k in (n - 1 for n in verify if n > 1))
