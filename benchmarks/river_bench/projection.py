"""A projection, not a measurement: lossless decoding's speed on a device where
bandwidth rules, from the counts of CPU runs (river_bench.lossless's JSON,
benchmarks/speculative.py --json); benchmarks/projection.py is its command line.

Assumptions, stated with every table: a forward's time is the matrix bytes it reads
divided by the bandwidth, so a plain token costs the backbone's bytes B, a drafted
river token the river's bytes R (every layer and its head on the river), an n-gram
proposal nothing; a verify of up to 16 positions costs what one token costs (the
weights are read once; the extra positions' compute hides under the reads). Each
configuration keeps the rounds it chose on the CPU: tokens per verify T and river
forwards per round D, as recorded. Then its projected ratio to the backbone is
T / (1 + D * R / B). The CPU chose shorter drafts than such a device would make
worth it (its verifies are costly), so the projection errs low where drafts are
accepted.
"""

from __future__ import annotations


def project(run: dict) -> list[tuple[str, float, float]]:
    """(configuration, measured CPU ratio, projected ratio) of one run's lossless rows."""
    bytes_ = run["weight_bytes"]
    out = []
    for row in run["rows"]:
        if "rounds" not in row or not row["rounds"] or not row["name"].startswith("lossless"):
            continue  # plain rows, and a separate draft model (whose bytes the run does not record)
        river = next((v for k, v in bytes_.items() if k != "backbone" and k in row["name"]), 0)
        per_round = row["draft_forwards"] / row["rounds"]
        tokens = row["generated"] / row["rounds"]
        out.append((row["name"], row["ratio"], tokens / (1 + per_round * river / bytes_["backbone"])))
    return out
