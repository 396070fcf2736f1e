"""The measurements behind benchmarks/kernel_roofline.py: our own products (csrc/own_*)
on one core against the peak of the dot-product instruction their kernels use.

Per kernel set here (_core.own_kernels()): the int8 multiply-adds per second of its
instruction in a loop of independent chains on this thread (the roofline's ceiling:
vpdpbusd on ymm for avx512vnni, with zmm beside it; the vpmaddubsw + vpmaddwd + vpaddd
sequence for avx2; sdot for neon; smmla, with sdot beside it, for i8mm; none for the
scalar reference). Per covered type, matrix shape and column count: one product of a
random matrix (packed once) by random columns (quantized once) as a graph's product
computes it on one thread, repeated, the fastest run; its rate is n_rows x n_in x n_cols
multiply-adds over its seconds, and its fraction of the kernels' own peak how far the
kernels are from the instruction's limit.
Repeated, a matrix stays in the caches where it fits (the 1.5B's matrices fit in a Zen 4
CCD's L3): the figures are of the kernels' arithmetic, not of a decode step's stream of
every matrix from memory (benchmarks/kernel_speed.py measures that).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

from river_cpp.engine import _core
from river_cpp.engine.probes.own_products import BLOCK_VALUES, COVERED

# [n_rows, n_in] of the 1.5B's (Qwen2.5-1.5B) attention q and o, and of its gate and up
SHAPES = ((1536, 1536), (8960, 1536))
COLUMNS = (1, 4, 8, 16, 64, 512)
SECONDS = 0.2
# --quick: one small matrix (a whole K-quant block per row and 8 row groups), brief runs
QUICK_SHAPES = ((64, 512),)
QUICK_SECONDS = 0.005


@dataclass(frozen=True)
class Peak:
    """One instruction's measured rate on this thread."""

    instruction: str
    gmac_per_s: float


@dataclass(frozen=True)
class Row:
    """One kernel set's products of one type and shape, per column count."""

    kernels: str
    type: str
    n_rows: int
    n_in: int
    gmac_per_s: dict[int, float]  # by column count; empty where the kernels have no product for the type
    fraction_of_peak: Optional[dict[int, float]]  # of the kernels' own peak; None for the reference


def shape(text: str) -> tuple[int, int]:
    """A matrix shape ROWSxN_IN (e.g. 1536x1536) as (n_rows, n_in); an argparse type."""
    try:
        n_rows, n_in = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is ROWSxN_IN, e.g. 1536x1536, not {text!r}") from None
    return n_rows, n_in


def check_shapes(shapes: Sequence[tuple[int, int]], types: Sequence[str]) -> None:
    """ValueError unless every shape has positive sides and rows of whole blocks of every type."""
    for n_rows, n_in in shapes:
        blocks = {BLOCK_VALUES[t] for t in types}
        if n_rows <= 0 or n_in <= 0 or any(n_in % b for b in blocks):
            raise ValueError(f"a shape {n_rows}x{n_in} needs positive sides and n_in a multiple of {max(blocks)}")


def measure(
    kernels: Sequence[str],
    types: Sequence[str] = COVERED,
    shapes: Sequence[tuple[int, int]] = SHAPES,
    columns: Sequence[int] = COLUMNS,
    seconds: float = SECONDS,
) -> tuple[dict[str, list[Peak]], list[Row]]:
    """Each kernel set's peaks, then its products of each type and shape at each column
    count, on this thread; each figure the fastest of runs over `seconds`."""
    check_shapes(shapes, types)
    peaks: dict[str, list[Peak]] = {}
    rows: list[Row] = []
    for name in kernels:
        peaks[name] = [Peak(i, rate / 1e9) for i, rate in _core.own_instruction_peaks(name, seconds)]
        ceiling = peaks[name][0].gmac_per_s if peaks[name] else None
        for type_name in types:
            for n_rows, n_in in shapes:
                try:
                    times = _core.own_product_seconds(name, type_name, n_rows, n_in, list(columns), seconds)
                except _core.RiverError:  # the shape is checked: these kernels have no product for the type
                    rows.append(Row(name, type_name, n_rows, n_in, {}, None))
                    continue
                rates = {n: n_rows * n_in * n / t / 1e9 for n, t in zip(columns, times)}
                fractions = {n: r / ceiling for n, r in rates.items()} if ceiling else None
                rows.append(Row(name, type_name, n_rows, n_in, rates, fractions))
    return peaks, rows


def table_lines(peaks: dict[str, list[Peak]], rows: Sequence[Row], columns: Sequence[int]) -> list[str]:
    """The peaks, one line per kernel set, then a Markdown table: GMAC/s per core at each
    column count, with the fraction of the kernels' own peak in brackets."""
    lines = []
    for name, found in peaks.items():
        figures = ", ".join(f"{p.instruction} {p.gmac_per_s:.1f} GMAC/s" for p in found) or "none (scalar code)"
        lines.append(f"peak of {name} on one core: {figures}")
    lines += [
        "",
        "| kernels | type | rows x n_in |" + "".join(f" n={n} |" for n in columns),
        "|---|---|---|" + "---:|" * len(columns),
    ]
    for row in rows:
        cells = []
        for n in columns:
            if n not in row.gmac_per_s:
                cells.append(" - |")
            elif row.fraction_of_peak is None:
                cells.append(f" {row.gmac_per_s[n]:.1f} |")
            else:
                cells.append(f" {row.gmac_per_s[n]:.1f} ({100 * row.fraction_of_peak[n]:.0f}%) |")
        lines.append(f"| {row.kernels} | {row.type} | {row.n_rows} x {row.n_in} |" + "".join(cells))
    return lines


def document(peaks: dict[str, list[Peak]], rows: Sequence[Row], seconds: float, load: Sequence[float]) -> dict:
    """What --json writes: the peaks, the rows and the conditions."""
    return {
        "unit": "GMAC/s on one thread (int8 multiply-adds)",
        "seconds_per_figure": seconds,
        "cpus": os.cpu_count(),
        "load": list(load),
        "peaks": {name: [asdict(p) for p in found] for name, found in peaks.items()},
        "rows": [asdict(row) for row in rows],
    }
