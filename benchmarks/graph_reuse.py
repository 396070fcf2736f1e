"""Where a decoded token's time goes, with decode graphs reused and built afresh:
graph build + allocation vs compute, per token, and what an exit check costs when it
never exits.

    python benchmarks/graph_reuse.py [-m MODEL.gguf] [-t 2] [-n 128] [-r 5]

Configurations, interleaved round by round on two loads of one model (graphs reused,
and built afresh):
- backbone: every token runs the full backbone, no exit check (one graph per token);
- checked: the same tokens, with the cosine check after every block from layer 1 on
  and a threshold no similarity reaches (the check's whole cost, no exit);
- river: the default decode, every token on the river.
Each with reuse on and off. Prints medians over rounds; --json writes them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from river_cpp import RiverModel
from river_cpp.apps.demo import demo_backbone_path
from river_cpp.decoding.policy import ExitPolicy

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", help="backbone GGUF (default: the demo model, F16)")
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("-n", "--tokens", type=int, default=128)
    parser.add_argument("-r", "--rounds", type=int, default=5)
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args()

    runs: dict[str, list[dict]] = {}
    path = args.model or demo_backbone_path()
    options = dict(n_threads=args.threads, n_ctx=1024, progress=False)
    # One load per setting (they share the mapped files): graph reuse is fixed at construction.
    with RiverModel(path, **options) as reusing, RiverModel(path, **options, reuse_graphs=False) as building:
        for model in (reusing, building):
            decode(model, POLICIES["river"], 8)  # warm the page cache and the CPU's kernels
        for _ in range(args.rounds):
            for name, policy in POLICIES.items():
                for model in (reusing, building):
                    label = f"{name}, {'reused' if model.engine.reuse_graphs else 'built'}"
                    runs.setdefault(label, []).append(decode(model, policy, args.tokens))

    summary = {name: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for name, rs in runs.items()}
    print(f"{'configuration':<20} {'tok/s':>7} {'build ms/tok':>13} {'compute ms/tok':>15} {'graphs/tok':>11}")
    for name, s in summary.items():
        print(
            f"{name:<20} {s['tokens_per_second']:7.1f} {s['build_ms_per_token']:13.3f} "
            f"{s['compute_ms_per_token']:15.3f} {s['graphs_per_token']:11.1f}"
        )
    for reuse in ("reused", "built"):
        # paired per round: the check's cost relative to the same round's plain backbone
        ratios = [
            c["tokens_per_second"] / b["tokens_per_second"]
            for c, b in zip(runs[f"checked, {reuse}"], runs[f"backbone, {reuse}"])
        ]
        overhead = 1 - statistics.median(ratios)
        print(f"never-exit check overhead, graphs {reuse}: {100 * overhead:.1f}% (median of {len(ratios)} rounds)")
        summary[f"check overhead, {reuse}"] = overhead
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"arguments": vars(args), "summary": summary, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
