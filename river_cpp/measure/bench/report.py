"""The bench report: rows of tokens/s, their llama-bench-shaped table and JSON.

Owns what a `measure` run found and how it is shown and saved (schema in
river_cpp.measure.bench); does not measure.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Union

from river_cpp.measure.configs import peer_name
from river_cpp.measure.ladder import BACKBONE_RUNG

FORMAT = "river-cpp-bench/1"
# The row every ratio is taken to: llama.cpp on the backbone GGUF.
REFERENCE = peer_name(BACKBONE_RUNG)
# Tokens in the cache before a tg test's timed steps.
TG_CONTEXT = 16
RIVER_ENGINE, LLAMA_ENGINE = "river-cpp", "llama.cpp"
_MIB = 1024 * 1024


@dataclass(frozen=True)
class BenchRow:
    """One configuration's result in one test (ppN or tgN)."""

    config: str
    engine: str  # RIVER_ENGINE or LLAMA_ENGINE
    test: str  # "pp512", "tg128"
    n_tokens: int
    size_bytes: int
    samples: tuple[float, ...]  # tokens/s, one per repetition
    mean_exit_layer: Optional[float] = None
    peak_rss_bytes: Optional[int] = None

    @property
    def t_s_mean(self) -> float:
        """Mean tokens/s over repetitions (llama-bench's "t/s")."""
        return statistics.fmean(self.samples)

    @property
    def t_s_sd(self) -> float:
        """Sample standard deviation over repetitions (0 for one)."""
        return statistics.stdev(self.samples) if len(self.samples) > 1 else 0.0

    @property
    def kind(self) -> str:
        """ "pp" or "tg"."""
        return self.test[:2]


@dataclass
class BenchReport:
    """Everything one `measure` found, with the conditions it ran under."""

    model: str
    n_prompt: int
    n_gen: int
    repetitions: int
    n_threads: int
    n_ctx: int
    rows: list[BenchRow]
    n_layer: Optional[int] = None
    tg_context: int = TG_CONTEXT
    cpu_count: Optional[int] = field(default_factory=os.cpu_count)
    load_average: Optional[float] = None
    rss_baseline_bytes: Optional[int] = None
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def configs(self) -> list[str]:
        """Configuration names, in the order measured."""
        return list(dict.fromkeys(row.config for row in self.rows))

    def row(self, config: str, kind: str) -> BenchRow:
        """The row of `config` in its "pp" or "tg" test; KeyError when it was not measured."""
        for row in self.rows:
            if row.config == config and row.kind == kind:
                return row
        raise KeyError(f"no {kind} result for {config!r} (measured: {', '.join(self.configs)})")

    def decode_tok_s(self, config: str) -> float:
        """Mean decode (tg) tokens/s of `config`."""
        return self.row(config, "tg").t_s_mean

    def prefill_tok_s(self, config: str) -> float:
        """Mean prefill (pp) tokens/s of `config`."""
        return self.row(config, "pp").t_s_mean

    def ratio(self, config: str, kind: str, reference: str = REFERENCE) -> Optional[float]:
        """`config`'s mean tokens/s over `reference`'s in the same test; None when either is missing."""
        try:
            return self.row(config, kind).t_s_mean / self.row(reference, kind).t_s_mean
        except KeyError:
            return None

    def whole_request(self, config: str) -> Optional[tuple[float, float]]:
        """(time to first token, whole-request seconds) of a request of n_prompt prompt
        tokens and n_gen answer tokens, from `config`'s pp and tg means: the prefill, then
        the first token from its logits and n_gen - 1 decode steps. None unless both
        tests ran."""
        try:
            ttft = self.n_prompt / self.prefill_tok_s(config)
            return ttft, ttft + max(self.n_gen - 1, 0) / self.decode_tok_s(config)
        except (KeyError, ZeroDivisionError):
            return None

    # ------------------------------------------------------------ table

    def table(self, reference: str = REFERENCE) -> str:
        """llama-bench's markdown table, plus the ratio to `reference` (when measured),
        the mean exit layer of our rows and each configuration's peak RSS; a header
        line with the conditions and a legend follow the llama-bench shape."""
        has_reference = any(row.config == reference for row in self.rows)
        has_exit = any(row.mean_exit_layer is not None for row in self.rows)
        has_rss = any(row.peak_rss_bytes is not None for row in self.rows)
        columns = ["config", "size", "test", "t/s (mean ± sd)"]
        columns += [f"/ {reference}"] * has_reference + ["exit layer"] * has_exit + ["peak RSS"] * has_rss
        load = "" if self.load_average is None else f", load average {self.load_average:.1f} on {self.cpu_count} CPUs"
        lines = [
            f"{Path(self.model).name}: {_plural(self.n_threads, 'thread')}, "
            f"{_plural(self.repetitions, 'repetition')} interleaved{load}",
            "",
            "| " + " | ".join(columns) + " |",
            "| " + " | ".join(["---"] + ["---:"] * (len(columns) - 1)) + " |",
        ]
        for row in self.rows:
            cells = [row.config, _mib(row.size_bytes), row.test, f"{row.t_s_mean:.2f} ± {row.t_s_sd:.2f}"]
            if has_reference:
                ratio = self.ratio(row.config, row.kind, reference)
                cells.append("" if ratio is None else f"{ratio:.2f}")
            if has_exit:
                cells.append("" if row.mean_exit_layer is None else f"{row.mean_exit_layer:.1f}/{self.n_layer}")
            if has_rss:
                cells.append("" if row.peak_rss_bytes is None else _mib(row.peak_rss_bytes))
            lines.append("| " + " | ".join(cells) + " |")
        requests = {config: self.whole_request(config) for config in self.configs}
        requests = {config: times for config, times in requests.items() if times is not None}
        if requests:
            base = requests.get(reference)
            lines += [
                "",
                f"| config | whole request pp{self.n_prompt}+tg{self.n_gen}: ttft s | whole s |"
                + (f" / {reference} |" if base else ""),
                "| --- | ---: | ---: |" + (" ---: |" if base else ""),
            ]
            for config, (ttft, whole) in requests.items():
                ratio = f" {base[1] / whole:.2f} |" if base else ""
                lines.append(f"| {config} | {ttft:.2f} | {whole:.2f} |{ratio}")
        lines.append("")
        lines.append(
            f"pp{self.n_prompt}: prompt from an empty cache; tg{self.n_gen}: single-token steps after "
            f"{self.tg_context} context tokens; same text tokens for all. size: weights loaded."
        )
        if has_exit:
            lines.append("exit layer: backbone layers per token (ours; the prompt exits at one depth).")
        if has_rss:
            base = (
                ""
                if self.rss_baseline_bytes is None
                else f" (of which {_mib(self.rss_baseline_bytes)} before loading the model)"
            )
            lines.append(f"peak RSS: a fresh process running this configuration alone{base}.")
        if requests:
            lines.append(
                "whole request: from the means above, the prefill and then the answer's other tokens one step "
                f"each (ttft: the prefill); / {reference}: its whole-request time over the row's "
                "(benchmarks/whole_requests.py times whole requests of real documents directly)."
            )
        return "\n".join(lines)

    # ------------------------------------------------------------ JSON

    def to_json(self) -> str:
        """The report as JSON text (schema in this module's docstring)."""
        data = asdict(self)
        data["rows"] = [
            dict(asdict(row), samples=list(row.samples), t_s_mean=row.t_s_mean, t_s_sd=row.t_s_sd) for row in self.rows
        ]
        return json.dumps({"format": FORMAT, **data}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> BenchReport:
        """A report from to_json's text (derived fields such as t_s_mean are recomputed)."""
        data = json.loads(text)
        if data.pop("format", None) != FORMAT:
            raise ValueError(f"not a {FORMAT} report")
        rows = []
        for row in data.pop("rows"):
            row.pop("t_s_mean", None)
            row.pop("t_s_sd", None)
            rows.append(BenchRow(**dict(row, samples=tuple(row["samples"]))))
        return cls(rows=rows, **data)

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Write to_json() to `path`."""
        Path(path).write_text(self.to_json())

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> BenchReport:
        """A report from a file that save() (or `river-cpp bench --json`) wrote."""
        return cls.from_json(Path(path).read_text())


def _mib(n_bytes: int) -> str:
    """llama-bench's size format, in MiB below a GiB so that small models stay readable."""
    return f"{n_bytes / _MIB:.2f} MiB" if n_bytes < 1024 * _MIB else f"{n_bytes / (1024 * _MIB):.2f} GiB"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")
