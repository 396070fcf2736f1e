"""The Pareto plot of an eval run: quality (mean KLD) against cost, one point per configuration.

Left panel: decode speed as a ratio, read from a `river-cpp bench` report (only the
configurations it measured appear). Right panel: weight bytes read per decoded
token, which `eval` computes itself and which does not depend on the machine's
noise. River's tau sweeps and llama.cpp's ladder are joined lines. matplotlib is an
optional dependency (`pip install river-cpp[plot]`), imported only here.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

from river_cpp.measure.comparison import FULL_RIVER, LLAMA, RANDOM, STATIC, VARIANT, Comparison, Row, plan

_MIB = 1024 * 1024
# Marker and colour of each kind of row; tau sweeps (groups "river <signal>") get the colour cycle.
_STYLE = {
    LLAMA: dict(marker="s", color="black"),
    FULL_RIVER: dict(marker="D", color="tab:red"),
    VARIANT: dict(marker="^", color="tab:purple"),
    STATIC: dict(marker="x", color="grey"),
    RANDOM: dict(marker="+", color="grey"),
}
_SWEEP_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:cyan")


def speed_ratios(bench_report, reference: Optional[str] = None) -> dict[str, float]:
    """Decode (tg) speed of each configuration in a river_cpp.measure.bench.BenchReport, as a ratio
    to `reference` (default: the report's own, llama.cpp on the backbone GGUF)."""
    from river_cpp.measure.bench import REFERENCE

    reference = reference or REFERENCE
    ratios = {}
    for name in bench_report.configs:
        ratio = bench_report.ratio(name, "tg", reference)
        if ratio is not None:
            ratios[name] = ratio
    return ratios


def merged(paths: Sequence[Union[str, os.PathLike]]) -> Comparison:
    """One Comparison with the rows of every eval file (first occurrence of a name
    wins); the files must share model and workload."""
    runs = [Comparison.load(p) for p in paths]
    first = runs[0]
    for run in runs[1:]:
        if (run.model, run.prefix, run.forced, run.n_chunks) != (
            first.model,
            first.prefix,
            first.forced,
            first.n_chunks,
        ):
            raise ValueError(f"eval runs differ in model or workload: {paths}")
    names: set[str] = set()
    rows = []
    for row in (r for run in runs for r in run.rows):
        if row.name not in names:
            names.add(row.name)
            rows.append(row)
    return replace(first, rows=rows)


def measured_configs(
    comparison: Comparison, taus: Sequence[float], signal_taus: Sequence[float], q8_taus: Sequence[float]
) -> list:
    """The river_cpp.measure.configs.RiverConfig of every row of `comparison` that can
    be rebuilt by name, and the backbone's: the bench's defaults at `taus`, the eval
    plan of the Q4_0 river at `taus` and `signal_taus`, and of the Q8_0 river's
    variants (backbone_prompt, head) at `q8_taus`. The eval runs must have used these
    options; rows whose configuration is not rebuilt get no speed."""
    from river_cpp.decoding.presets import FAST
    from river_cpp.measure.bench import default_configs

    configs = default_configs(taus)
    configs += [e.config for e in plan(comparison.n_layer, taus=taus, signal_taus=signal_taus)]
    configs += [
        e.config for e in plan(comparison.n_layer, taus=q8_taus, river=FAST.river, variants=["backbone_prompt", "head"])
    ]
    measured = {r.name for r in comparison.rows}
    return list({c.name: c for c in configs if c.name in measured or c.name == "backbone"}.values())


def plot_pareto(
    comparison: Comparison,
    out: Union[str, os.PathLike],
    *,
    speeds: Optional[Mapping[str, float]] = None,
    speed_label: str = "decode speed / llama.cpp F16",
) -> Path:
    """Write pareto_figure's plot as a PNG at `out`."""
    path = Path(out)
    pareto_figure(comparison, speeds=speeds, speed_label=speed_label).savefig(path, dpi=120)
    return path


def pareto_figure(
    comparison: Comparison,
    *,
    speeds: Optional[Mapping[str, float]] = None,
    speed_label: str = "decode speed / llama.cpp F16",
):
    """The two-panel figure (a matplotlib Figure); `speeds` maps configuration names to
    decode speed ratios. Rows whose mean KLD is not positive (nothing to show on a log
    axis) are left out."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = [r for r in comparison.rows if r.quality.mean_kl > 0]
    figure = Figure(figsize=(14, 6), layout="constrained")
    FigureCanvasAgg(figure)
    speed_axes, bytes_axes = figure.subplots(1, 2, sharey=True)
    speeds = speeds or {}
    sweeps = list(dict.fromkeys(r.group for r in rows if r.group not in _STYLE))
    styles = {
        **_STYLE,
        **{g: dict(marker="o", color=_SWEEP_COLOURS[i % len(_SWEEP_COLOURS)]) for i, g in enumerate(sweeps)},
    }
    _panel(speed_axes, [(speeds[r.name], r) for r in rows if r.name in speeds], speed_label, styles)
    if not any(r.name in speeds for r in rows):
        speed_axes.text(
            0.5,
            0.5,
            "no decode speeds for these configurations:\npass --bench FILE from `river-cpp bench --json FILE`",
            ha="center",
            va="center",
            transform=speed_axes.transAxes,
            color="grey",
        )
    _panel(bytes_axes, [(r.bytes_per_token / _MIB, r) for r in rows], "weight MiB read per decoded token", styles)
    bytes_axes.invert_xaxis()  # fewer bytes is better: better points lie towards the lower right, as for speed
    speed_axes.set_ylabel("mean KL divergence from the backbone (nats, log)")
    figure.suptitle(
        f"{Path(comparison.model).name}: {comparison.n_chunks * comparison.forced} teacher-forced decode positions"
    )
    return figure


def _panel(axes, points: list[tuple[float, Row]], xlabel: str, styles: dict[str, dict]) -> None:
    """One panel: a series per row group; tau sweeps and the llama.cpp ladder joined, in row order."""
    axes.set_xlabel(xlabel)
    axes.set_yscale("log")
    axes.grid(True, which="both", alpha=0.3)
    groups: dict[str, list[tuple[float, Row]]] = {}
    for x, row in points:
        groups.setdefault(row.group, []).append((x, row))
    for group, members in groups.items():
        xs, ys = [x for x, _ in members], [r.quality.mean_kl for _, r in members]
        joined = group == LLAMA or group not in _STYLE
        axes.plot(xs, ys, linestyle="-" if joined else "none", label=group, **styles[group])
        for x, row in members:
            if row.group not in (STATIC, RANDOM):
                axes.annotate(
                    _label(row), (x, row.quality.mean_kl), textcoords="offset points", xytext=(4, 4), fontsize=7
                )
    if points:
        axes.legend(fontsize=8)


def _label(row: Row) -> str:
    """Short point labels: the tau of a sweep point, the rung of a llama.cpp point, else the name."""
    if row.group == LLAMA:
        return row.name.removeprefix("llama.cpp ")
    tau = re.fullmatch(r"river tau=([0-9.e+-]+)(?: \w+)?", row.name)
    return tau.group(1) if tau and row.group not in (VARIANT, FULL_RIVER) else row.name
