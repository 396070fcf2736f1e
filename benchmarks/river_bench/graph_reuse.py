"""Where a decoded token's time goes, with decode graphs reused and built afresh:
graph build + allocation vs compute, per token, and what an exit check costs when it
never exits (benchmarks/graph_reuse.py is its command line).

Configurations (POLICIES), interleaved round by round on one model:
- backbone: every token runs the full backbone, no exit check (one graph per token);
- checked: the same tokens, with the cosine check after every block from layer 1 on
  and a threshold no similarity reaches (the check's whole cost, no exit);
- river: the default decode, every token on the river.
Each with reuse on and off (two models, as reuse is fixed at load); medians over rounds.
"""

from __future__ import annotations

import statistics
import time

from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.model import RiverModel

PROMPT = "The river carried the boat past the old mill, and the miller's daughter"
WARM_UP = 4
POLICIES = {
    "backbone": ExitPolicy.never(),
    "checked": ExitPolicy.uniform(2.0, min_layer=1),  # cosine never exceeds 1: checked, never taken
    "river": ExitPolicy.at_layer(0),
}


def decode(model: RiverModel, policy: ExitPolicy, n_tokens: int) -> dict:
    """One timed decode of n_tokens under `policy` after the (untimed) prompt and WARM_UP steps."""
    model.reset()
    ids = model.tokenize(PROMPT)
    token = int(model.forward(ids, route="backbone")[-1].argmax())
    for _ in range(WARM_UP):  # steady state: the shapes of this decode are built (when kept)
        token = int(model.forward([token], route="decode", policy=policy)[-1].argmax())
    model.engine.reset_graph_stats()
    start = time.perf_counter()
    for _ in range(n_tokens):
        token = int(model.forward([token], route="decode", policy=policy)[-1].argmax())
    seconds = time.perf_counter() - start
    stats = model.engine.graph_stats
    return {
        "tokens_per_second": n_tokens / seconds,
        "build_ms_per_token": 1e3 * stats["build_seconds"] / n_tokens,
        "compute_ms_per_token": 1e3 * stats["compute_seconds"] / n_tokens,
        "builds_per_token": stats["builds"] / n_tokens,
        "graphs_per_token": (stats["builds"] + stats["reuses"]) / n_tokens,
    }


def run(reusing: RiverModel, building: RiverModel, n_tokens: int, rounds: int) -> dict[str, list[dict]]:
    """Configuration ("backbone, reused", ...) -> one decode() per round, the
    configurations interleaved within each round, after one untimed warm-up decode.
    `reusing` and `building`: the same files loaded with reuse_graphs True and False."""
    runs: dict[str, list[dict]] = {}
    for model in (reusing, building):
        decode(model, ExitPolicy.never(), 8)  # warm the page cache and the CPU's kernels
    for _ in range(rounds):
        for name, policy in POLICIES.items():
            for model in (reusing, building):
                label = f"{name}, {'reused' if model.engine.reuse_graphs else 'built'}"
                runs.setdefault(label, []).append(decode(model, policy, n_tokens))
    return runs


def summarize(runs: dict[str, list[dict]]) -> dict:
    """Each configuration's medians over its rounds, and per reuse setting the never-exit
    check's overhead ("check overhead, reused"/"built"): 1 - the median over rounds of
    the checked decode's speed relative to the same round's plain backbone."""
    summary: dict = {name: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for name, rs in runs.items()}
    for reuse in ("reused", "built"):
        ratios = [
            c["tokens_per_second"] / b["tokens_per_second"]
            for c, b in zip(runs[f"checked, {reuse}"], runs[f"backbone, {reuse}"])
        ]
        summary[f"check overhead, {reuse}"] = 1 - statistics.median(ratios)
    return summary


def table_lines(summary: dict, rounds: int) -> list[str]:
    """The summary as the command prints it."""
    lines = [f"{'configuration':<20} {'tok/s':>7} {'build ms/tok':>13} {'compute ms/tok':>15} {'graphs/tok':>11}"]
    for name, s in summary.items():
        if not name.startswith("check overhead"):
            lines.append(
                f"{name:<20} {s['tokens_per_second']:7.1f} {s['build_ms_per_token']:13.3f} "
                f"{s['compute_ms_per_token']:15.3f} {s['graphs_per_token']:11.1f}"
            )
    for reuse in ("reused", "built"):
        overhead = summary[f"check overhead, {reuse}"]
        lines.append(f"never-exit check overhead, graphs {reuse}: {100 * overhead:.1f}% (median of {rounds} rounds)")
    return lines
