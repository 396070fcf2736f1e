"""One bench session: load every target, time the tests interleaved, measure peak RSS
apart, and report. Builds on .runners (what runs) and .rss (the peak-RSS child), which
know nothing of each other's callers.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from river_cpp.measure.bench.report import RIVER_ENGINE, TG_CONTEXT, BenchReport, BenchRow
from river_cpp.measure.bench.rss import probe_peak_rss
from river_cpp.measure.bench.runners import DEFAULT_PEERS, Runner, Target, Work, _targets, bench_tokens, open_runner
from river_cpp.measure.configs import RiverConfig


def measure(
    backbone: Union[str, os.PathLike],
    configs: Sequence[RiverConfig],
    peers: Sequence[str] = DEFAULT_PEERS,
    *,
    n_prompt: int = 512,
    n_gen: int = 128,
    repeats: int = 5,
    n_threads: Optional[int] = None,
    memory: bool = True,
    progress: bool = True,
    n_gpu_layers: int = -1,
) -> BenchReport:
    """Prefill and decode tokens/s of each configuration and llama.cpp peer, interleaved.

    backbone: the GGUF file every configuration and peer derives from.
    configs: our configurations (RiverConfig), each a row named config.name.
    peers: llama.cpp rungs, rows named peer_name(rung): BACKBONE_RUNG ("F16") is the
        backbone file itself, the others LADDER_TYPES keys (quantized once, cached).
    n_prompt / n_gen: tokens of the ppN / tgN tests; 0 skips that test.
    repeats: timed repetitions of every test (after one warm-up).
    n_threads: threads for ours and llama.cpp alike (default: all cores).
    memory: also measure each configuration's peak RSS in a fresh process.
    n_gpu_layers: offloaded layers, ours and llama.cpp's alike (see RiverModel).
    """
    from tqdm import tqdm

    from river_cpp._cpus import n_threads_or_default

    n_prompt, n_gen = _count("n_prompt", n_prompt), _count("n_gen", n_gen)
    if n_prompt == 0 and n_gen == 0:
        raise ValueError("n_prompt and n_gen are both 0: nothing to measure")
    repeats = _count("repeats", repeats, minimum=1)
    n_threads = _count("n_threads", n_threads_or_default(n_threads), minimum=1)
    targets = _targets(Path(backbone), configs, peers)
    tests = [("pp", n_prompt)] * (n_prompt > 0) + [("tg", n_gen)] * (n_gen > 0)
    # + 1: generate_step stops when the cache is full, and the last timed step fills it
    n_ctx = max(n_prompt, TG_CONTEXT + n_gen) + 1
    ids = bench_tokens(backbone, n_ctx)  # the peers are quantized from it: one vocabulary
    work = Work(prompt=ids[:n_prompt], context=ids[:TG_CONTEXT], decode=ids[TG_CONTEXT : TG_CONTEXT + n_gen])

    runners: list[Runner] = []
    try:
        for target in tqdm(targets, desc="loading", unit="model", disable=not progress, leave=False):
            runners.append(
                open_runner(target, n_ctx=n_ctx, n_threads=n_threads, progress=progress, n_gpu_layers=n_gpu_layers)
            )
        samples, exits = _time_interleaved(runners, [kind for kind, _ in tests], work, repeats, progress=progress)
        sizes = {runner.target.name: runner.size_bytes() for runner in runners}
        n_layer = next((r.model.n_layer for r in runners if r.target.engine == RIVER_ENGINE), None)
    finally:
        for runner in runners:
            runner.close()

    load_average = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    peaks: dict[str, Optional[int]] = {t.name: None for t in targets}
    baseline: Optional[int] = None
    if memory:
        peaks, baseline = _peak_rss(targets, n_ctx=n_ctx, n_threads=n_threads, work=work, progress=progress)
    return BenchReport(
        model=str(backbone),
        n_prompt=n_prompt,
        n_gen=n_gen,
        repetitions=repeats,
        n_threads=n_threads,
        n_ctx=n_ctx,
        rows=_rows(targets, tests, sizes, samples, exits, peaks),
        n_layer=n_layer,
        load_average=load_average,
        rss_baseline_bytes=baseline,
        versions=_versions(),
    )


def _time_interleaved(
    runners: Sequence[Runner], kinds: Sequence[str], work: Work, repeats: int, *, progress: bool
) -> tuple[dict[tuple[str, str], list[float]], dict[tuple[str, str], Optional[float]]]:
    """Every runner's tests (`kinds`: "pp", "tg") once to warm up, then `repeats` times,
    each repetition going through every runner in turn, so that a machine's drift
    (heat, other load) falls on all of them alike. Returns the timed tokens/s by
    (target, test) and the warm-up's mean exit layer by (target, test)."""
    from tqdm import tqdm

    samples: dict[tuple[str, str], list[float]] = {(r.target.name, kind): [] for r in runners for kind in kinds}
    exits: dict[tuple[str, str], Optional[float]] = {}
    schedule = [(None, runner, kind) for runner in runners for kind in kinds]  # None: warm-up
    schedule += [(rep, runner, kind) for rep in range(repeats) for runner in runners for kind in kinds]
    with tqdm(schedule, desc="bench", unit="run", disable=not progress) as bar:
        for rep, runner, kind in bar:
            bar.set_postfix_str(f"{runner.target.name} {kind}" + (" warm-up" if rep is None else ""))
            tok_s, mean_exit = runner.run(kind, work)
            if rep is None:
                exits[(runner.target.name, kind)] = mean_exit
            else:
                samples[(runner.target.name, kind)].append(tok_s)
    return samples, exits


def _peak_rss(
    targets: Sequence[Target], *, n_ctx: int, n_threads: int, work: Work, progress: bool
) -> tuple[dict[str, Optional[int]], int]:
    """Each target's peak RSS running `work` in a fresh process, and the median of
    those processes' RSS high-water marks before loading (the interpreter's own)."""
    from tqdm import tqdm

    peaks: dict[str, Optional[int]] = {}
    baselines = []
    for target in tqdm(targets, desc="peak RSS", unit="process", disable=not progress):
        baseline_bytes, peaks[target.name] = probe_peak_rss(target, n_ctx=n_ctx, n_threads=n_threads, work=work)
        baselines.append(baseline_bytes)
    return peaks, int(statistics.median(baselines))


def _rows(
    targets: Sequence[Target],
    tests: Sequence[tuple[str, int]],
    sizes: Mapping[str, int],
    samples: Mapping[tuple[str, str], Sequence[float]],
    exits: Mapping[tuple[str, str], Optional[float]],
    peaks: Mapping[str, Optional[int]],
) -> list[BenchRow]:
    """A row per target and test (`tests`: ("pp" or "tg", its token count))."""
    return [
        BenchRow(
            config=t.name,
            engine=t.engine,
            test=f"{kind}{count}",
            n_tokens=count,
            size_bytes=sizes[t.name],
            samples=tuple(samples[(t.name, kind)]),
            mean_exit_layer=exits[(t.name, kind)],
            peak_rss_bytes=peaks[t.name],
        )
        for t in targets
        for kind, count in tests
    ]


def _count(name: str, value: object, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        kind = "a positive" if minimum == 1 else "a non-negative"
        raise ValueError(f"{name} must be {kind} integer, got {value!r}")
    return int(value)


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {"river_cpp": version("river-cpp"), "llama_cpp_python": version("llama-cpp-python")}
