"""Speed of River configurations and of llama.cpp on the same backbone: `river-cpp bench`.

Owns the measurement (prefill and decode tokens/s, peak resident memory) and its
report (a llama-bench-shaped table, JSON). It does not judge quality: that is
river_cpp.evaluate's job, which may read decode speeds from here.

How it measures
---------------
- Every configuration (ours: RiverModel in a RiverConfig; peers: llama-cpp-python's
  Llama on the backbone GGUF, "F16", or on a cached llama.cpp quantization of it) is
  loaded at once in this process, with the same context length, batch size (512) and
  threads (for single tokens and batches alike). llama.cpp runs without flash
  attention, as our engine does, and both hand Python the last position's logits.
- After one untimed warm-up of each test, each repetition runs every configuration's
  tests in turn (round-robin), so slow drifts of the machine (other load, heat) fall
  on all configurations alike rather than on whichever ran last.
- ppN: N prompt tokens from an empty cache, one timed forward (split into 512-token
  batches by both engines).
- tgN: an untimed prefill of TG_CONTEXT tokens, then N timed single-token decode steps.
  llama-bench decodes from an empty context; the short prefill makes the decoded
  tokens continue text, as in generation, and the context stays short as in llama-bench.
- The token ids are the same fixed sequence for every configuration: the project's
  chat prompts (river_cpp.corpus.chat_prompts, in the model's chat template) tokenized
  by the backbone's vocabulary, repeated when a test needs more. llama-bench feeds
  random ids, which cost the same as text for a plain model; River's exits depend on
  the text, so random ids would measure exit rates no user sees. Decode steps feed the
  sequence's next tokens (teacher forcing), not each configuration's own greedy
  choice, so all configurations do the same work but for where their tokens exit.
- A River configuration's tokens take their own exits, as in generation: the prompt
  exits at one depth, each decoded token at its own. The mean exit layer of each test
  (backbone layers per token; n_layer means never left) is recorded from the warm-up.
- size: the bytes of weight tensors the configuration loads (llama-bench's "size"):
  the backbone's, plus the river's for a River configuration (the full river still
  maps the backbone for its embedding and output head).
- peak RSS: measured apart from the speed runs, since one process's high-water mark
  cannot be split between the models it holds. Each configuration is loaded alone in a
  fresh Python process that runs each test once; its peak resident set size (VmHWM on
  Linux, ru_maxrss elsewhere) is reported. It includes the interpreter and libraries (rss_baseline_bytes: the same
  process's mark before loading the model) and the mapped weight pages it touched.

JSON (BenchReport.to_json)
--------------------------
    {"format": "river-cpp-bench/1",
     "model": "path/of/backbone.gguf", "n_layer": 30,
     "n_prompt": 512, "n_gen": 128, "repetitions": 5, "n_threads": 4, "n_ctx": 512,
     "tg_context": 16, "cpu_count": 8,
     "load_average": 2.2,   # 1-minute load after the timed runs, their own threads included
     "rss_baseline_bytes": 123456789,                          # or null: not measured
     "versions": {"river_cpp": "0.1.0", "llama_cpp_python": "0.3.36"},
     "rows": [{"config": "river tau=0.98", "engine": "river-cpp",   # or "llama.cpp"
               "test": "tg128", "n_tokens": 128, "size_bytes": 367001600,
               "t_s_mean": 101.2, "t_s_sd": 1.3, "samples": [100.1, 102.3],   # tokens/s
               "mean_exit_layer": 15.8,                                  # null for llama.cpp
               "peak_rss_bytes": 512000000}, ...]}                     # null: not measured

Rows come in the order measured: each configuration's pp row, then its tg row.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import pickle
import resource
import statistics
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from river_cpp.configs import RiverConfig, backbone_config, full_river, peer_name, river_at_tau
from river_cpp.ladder import LADDER_TYPES, ladder_path

FORMAT = "river-cpp-bench/1"
# The peer rung that names the backbone GGUF itself, whatever its type (F16 in this project).
BACKBONE_RUNG = "F16"
DEFAULT_PEERS: tuple[str, ...] = (BACKBONE_RUNG,) + tuple(LADDER_TYPES)
# The row every ratio is taken to: llama.cpp on the backbone GGUF.
REFERENCE = peer_name(BACKBONE_RUNG)
# Tokens in the cache before a tg test's timed steps.
TG_CONTEXT = 16
RIVER_ENGINE, LLAMA_ENGINE = "river-cpp", "llama.cpp"
_MIB = 1024 * 1024


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class BenchRow:
    """One configuration's result in one test (ppN or tgN)."""

    config: str
    engine: str                      # RIVER_ENGINE or LLAMA_ENGINE
    test: str                        # "pp512", "tg128"
    n_tokens: int
    size_bytes: int
    samples: tuple[float, ...]       # tokens/s, one per repetition
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
        """"pp" or "tg"."""
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
        lines.append("")
        lines.append(f"pp{self.n_prompt}: prompt from an empty cache; tg{self.n_gen}: single-token steps after "
                     f"{self.tg_context} context tokens; same text tokens for all. size: weights loaded.")
        if has_exit:
            lines.append("exit layer: backbone layers per token (ours; the prompt exits at one depth).")
        if has_rss:
            base = "" if self.rss_baseline_bytes is None else f" (of which {_mib(self.rss_baseline_bytes)} " \
                                                             f"before loading the model)"
            lines.append(f"peak RSS: a fresh process running this configuration alone{base}.")
        return "\n".join(lines)

    # ------------------------------------------------------------ JSON

    def to_json(self) -> str:
        """The report as JSON text (schema in this module's docstring)."""
        data = asdict(self)
        data["rows"] = [dict(asdict(row), samples=list(row.samples), t_s_mean=row.t_s_mean, t_s_sd=row.t_s_sd)
                        for row in self.rows]
        return json.dumps({"format": FORMAT, **data}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "BenchReport":
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
    def load(cls, path: Union[str, os.PathLike]) -> "BenchReport":
        """A report from a file that save() (or `river-cpp bench --json`) wrote."""
        return cls.from_json(Path(path).read_text())


def _mib(n_bytes: int) -> str:
    """llama-bench's size format, in MiB below a GiB so that small models stay readable."""
    return f"{n_bytes / _MIB:.2f} MiB" if n_bytes < 1024 * _MIB else f"{n_bytes / (1024 * _MIB):.2f} GiB"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


# ---------------------------------------------------------------- configurations


def default_configs(taus: Sequence[float] = (0.97, 0.98, 0.99), *, river: Optional[str] = "q4_0",
                    min_layer: int = 2, with_full_river: bool = True) -> list[RiverConfig]:
    """Our backbone, River at each tau and the full river (river=None: the backbone alone)."""
    configs = [backbone_config()]
    if river is not None:
        configs += [river_at_tau(tau, river=river, min_layer=min_layer) for tau in taus]
        if with_full_river:
            configs.append(full_river(river))
    return configs


# ---------------------------------------------------------------- measure


def measure(backbone: Union[str, os.PathLike], configs: Sequence[RiverConfig], peers: Sequence[str] = DEFAULT_PEERS,
            *, n_prompt: int = 512, n_gen: int = 128, repeats: int = 5, n_threads: Optional[int] = None,
            memory: bool = True, progress: bool = True) -> BenchReport:
    """Prefill and decode tokens/s of each configuration and llama.cpp peer, interleaved.

    backbone: the GGUF file every configuration and peer derives from.
    configs: our configurations (RiverConfig), each a row named config.name.
    peers: llama.cpp rungs, rows named peer_name(rung): BACKBONE_RUNG ("F16") is the
        backbone file itself, the others LADDER_TYPES keys (quantized once, cached).
    n_prompt / n_gen: tokens of the ppN / tgN tests; 0 skips that test.
    repeats: timed repetitions of every test (after one warm-up).
    n_threads: threads for ours and llama.cpp alike (default: all cores).
    memory: also measure each configuration's peak RSS in a fresh process.
    """
    from river_cpp.model import default_n_threads

    n_prompt, n_gen = _count("n_prompt", n_prompt), _count("n_gen", n_gen)
    if n_prompt == 0 and n_gen == 0:
        raise ValueError("n_prompt and n_gen are both 0: nothing to measure")
    repeats = _count("repeats", repeats, minimum=1)
    n_threads = default_n_threads() if n_threads is None else _count("n_threads", n_threads, minimum=1)
    targets = _targets(Path(backbone), configs, peers)
    tests = [("pp", n_prompt)] * (n_prompt > 0) + [("tg", n_gen)] * (n_gen > 0)
    n_ctx = max(n_prompt, TG_CONTEXT + n_gen)
    ids = bench_tokens(backbone, n_ctx)  # the peers are quantized from it: one vocabulary
    work = _Work(prompt=ids[:n_prompt], context=ids[:TG_CONTEXT], decode=ids[TG_CONTEXT:TG_CONTEXT + n_gen])

    from tqdm import tqdm

    runners: list[_Runner] = []
    try:
        for target in tqdm(targets, desc="loading", unit="model", disable=not progress, leave=False):
            runners.append(_open(target, n_ctx=n_ctx, n_threads=n_threads, progress=progress))
        samples: dict[tuple[str, str], list[float]] = {(t.name, kind): [] for t in targets for kind, _ in tests}
        exits: dict[tuple[str, str], Optional[float]] = {}
        schedule = [(None, runner, kind) for runner in runners for kind, _ in tests]  # None: warm-up
        schedule += [(rep, runner, kind) for rep in range(repeats) for runner in runners for kind, _ in tests]
        with tqdm(schedule, desc="bench", unit="run", disable=not progress) as bar:
            for rep, runner, kind in bar:
                bar.set_postfix_str(f"{runner.target.name} {kind}" + (" warm-up" if rep is None else ""))
                tok_s = runner.run(kind, work, record=rep is None)
                if rep is None:
                    exits[(runner.target.name, kind)] = runner.mean_exit_layer()
                else:
                    samples[(runner.target.name, kind)].append(tok_s)
        sizes = {runner.target.name: runner.size_bytes() for runner in runners}
        n_layer = next((r.n_layer for r in runners if isinstance(r, _RiverRunner)), None)
    finally:
        for runner in runners:
            runner.close()

    load_average = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    peaks: dict[str, Optional[int]] = {t.name: None for t in targets}
    baseline: Optional[int] = None
    if memory:
        baselines = []
        for target in tqdm(targets, desc="peak RSS", unit="process", disable=not progress):
            baseline_bytes, peaks[target.name] = _probe_peak_rss(target, n_ctx=n_ctx, n_threads=n_threads, work=work)
            baselines.append(baseline_bytes)
        baseline = int(statistics.median(baselines))

    counts = dict(tests)
    rows = [BenchRow(config=t.name, engine=t.engine, test=f"{kind}{counts[kind]}", n_tokens=counts[kind],
                     size_bytes=sizes[t.name], samples=tuple(samples[(t.name, kind)]),
                     mean_exit_layer=exits[(t.name, kind)], peak_rss_bytes=peaks[t.name])
            for t in targets for kind, _ in tests]
    return BenchReport(model=str(backbone), n_prompt=n_prompt, n_gen=n_gen, repetitions=repeats,
                       n_threads=n_threads, n_ctx=n_ctx, rows=rows, n_layer=n_layer, load_average=load_average,
                       rss_baseline_bytes=baseline, versions=_versions())


def _count(name: str, value: object, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        kind = "a positive" if minimum == 1 else "a non-negative"
        raise ValueError(f"{name} must be {kind} integer, got {value!r}")
    return int(value)


def _versions() -> dict[str, str]:
    import llama_cpp

    import river_cpp

    return {"river_cpp": river_cpp.__version__, "llama_cpp_python": llama_cpp.__version__}


# ---------------------------------------------------------------- tokens


def bench_tokens(model_path: Union[str, os.PathLike], n_tokens: int) -> list[int]:
    """The fixed token sequence every configuration is fed: BOS (when the model adds
    one), then the project's chat prompts in the model's chat template, repeated."""
    from river_cpp._ggml import set_ggml_verbosity
    from river_cpp.corpus import chat_prompts, document_tokens
    from river_cpp.tokenizer import Tokenizer

    set_ggml_verbosity(False)  # loading a vocabulary logs every metadata key otherwise
    tokenizer = Tokenizer(os.fspath(model_path))
    try:
        bos = tokenizer.tokenize("", add_bos=True)
        stream = [token for doc in chat_prompts() for token in document_tokens(tokenizer, doc)]
    finally:
        tokenizer.close()
    return bos + list(itertools.islice(itertools.cycle(stream), max(0, n_tokens - len(bos))))


# ---------------------------------------------------------------- what runs


@dataclass(frozen=True)
class _Target:
    """One row source: our engine in a configuration, or llama.cpp on a GGUF file."""

    name: str
    engine: str
    path: Path                     # the backbone (ours) or the peer's GGUF
    config: Optional[RiverConfig] = None


@dataclass(frozen=True)
class _Work:
    prompt: list[int]     # pp: from an empty cache
    context: list[int]    # tg: untimed prefill
    decode: list[int]     # tg: one timed step each


def _targets(backbone: Path, configs: Sequence[RiverConfig], peers: Sequence[str]) -> list[_Target]:
    """What to run, checked before anything loads; ladder rungs are quantized here (once,
    cached), so that no timing waits for them."""
    if not backbone.is_file():
        raise FileNotFoundError(f"model file not found: {backbone}")
    for config in configs:
        if not isinstance(config, RiverConfig):
            raise TypeError(f"configs must be RiverConfig, got {type(config).__name__}")
    for rung in peers:
        if rung != BACKBONE_RUNG and rung not in LADDER_TYPES:
            raise ValueError(f"unknown llama.cpp peer {rung!r} (known: {', '.join(DEFAULT_PEERS)})")
    names = [config.name for config in configs] + [peer_name(rung) for rung in peers]
    if not names:
        raise ValueError("nothing to measure: no configurations and no peers")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"configuration names must be unique; repeated: {', '.join(map(repr, duplicates))}")
    targets = [_Target(config.name, RIVER_ENGINE, backbone, config) for config in configs]
    targets += [_Target(peer_name(rung), LLAMA_ENGINE, backbone if rung == BACKBONE_RUNG else ladder_path(backbone, rung))
                for rung in peers]
    return targets


class _Runner:
    """A loaded configuration that can run a test and report its speed."""

    target: _Target
    record: bool = False

    def reset(self) -> None: ...
    def prefill(self, ids: Sequence[int]) -> None: ...
    def decode(self, token: int) -> None: ...
    def close(self) -> None: ...
    def size_bytes(self) -> int: ...
    def mean_exit_layer(self) -> Optional[float]:
        return None

    def run(self, kind: str, work: _Work, *, record: bool = False) -> float:
        """One ppN or tgN test; tokens/s of its timed part. `record`: keep the exit
        layers for mean_exit_layer (the warm-up does; timed runs skip the bookkeeping)."""
        self.record = record
        self.reset()
        if kind == "pp":
            start = time.perf_counter()
            self.prefill(work.prompt)
            return len(work.prompt) / (time.perf_counter() - start)
        self.prefill(work.context)
        self._begin_decode()
        start = time.perf_counter()
        for token in work.decode:
            self.decode(token)
        seconds = time.perf_counter() - start
        return len(work.decode) / seconds

    def _begin_decode(self) -> None:
        pass


class _RiverRunner(_Runner):
    def __init__(self, target: _Target, *, n_ctx: int, n_threads: int, progress: bool) -> None:
        assert target.config is not None
        self.target = target
        self.model = target.config.load(target.path, n_ctx=n_ctx, n_threads=n_threads, progress=progress)
        self.n_layer = self.model.n_layer
        self._exits: list[int] = []

    def reset(self) -> None:
        self.model.reset()
        self._exits = []

    def prefill(self, ids: Sequence[int]) -> None:
        self.model.forward(ids, last_only=True)
        if self.record:
            self._exits = [int(layer) for layer in self.model.last_exit_layers]

    def _begin_decode(self) -> None:
        self._exits = []

    def decode(self, token: int) -> None:
        self.model.forward([token], last_only=True)
        if self.record:
            self._exits.append(int(self.model.last_exit_layers[0]))

    def mean_exit_layer(self) -> Optional[float]:
        return float(np.mean(self._exits)) if self._exits else None

    def size_bytes(self) -> int:
        river = self.model.river_path
        return gguf_tensor_bytes(self.target.path) + (gguf_tensor_bytes(river) if river is not None else 0)

    def close(self) -> None:
        self.model.close()


class _LlamaRunner(_Runner):
    """llama.cpp set up like RiverModel: same threads for batches and single tokens,
    512-token batches, no flash attention, the last position's logits copied out."""

    def __init__(self, target: _Target, *, n_ctx: int, n_threads: int) -> None:
        import llama_cpp

        self._llama_cpp = llama_cpp
        self.target = target
        self.llama = llama_cpp.Llama(str(target.path), n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                                     n_batch=512, n_ubatch=512, flash_attn=False, logits_all=False, verbose=False)

    def reset(self) -> None:
        self.llama.reset()  # the next eval drops the cached positions

    def prefill(self, ids: Sequence[int]) -> None:
        self.llama.eval(ids)
        self._copy_logits()

    def decode(self, token: int) -> None:
        self.llama.eval([token])
        self._copy_logits()

    def _copy_logits(self) -> np.ndarray:
        # RiverModel.forward returns a fresh logits array; do the same work here.
        pointer = self._llama_cpp.llama_get_logits_ith(self.llama.ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(self.llama.n_vocab(),)).copy()

    def size_bytes(self) -> int:
        return gguf_tensor_bytes(self.target.path)

    def close(self) -> None:
        self.llama.close()


def _open(target: _Target, *, n_ctx: int, n_threads: int, progress: bool = False) -> _Runner:
    if target.engine == RIVER_ENGINE:
        return _RiverRunner(target, n_ctx=n_ctx, n_threads=n_threads, progress=progress)
    return _LlamaRunner(target, n_ctx=n_ctx, n_threads=n_threads)


# ---------------------------------------------------------------- peak RSS


@dataclass(frozen=True)
class _Probe:
    target: _Target
    n_ctx: int
    n_threads: int
    work: _Work


def _probe_peak_rss(target: _Target, *, n_ctx: int, n_threads: int, work: _Work) -> tuple[int, int]:
    """(RSS high-water mark before loading, after running each test once) of a fresh
    Python process that holds this configuration alone."""
    command = [sys.executable, "-c", "import sys; from river_cpp.bench import _probe_main; sys.exit(_probe_main())"]
    done = subprocess.run(command, input=pickle.dumps(_Probe(target, n_ctx, n_threads, work)), capture_output=True)
    lines = done.stdout.decode(errors="replace").splitlines()
    if done.returncode != 0 or not lines:
        detail = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the peak-RSS process for {target.name!r} failed: {detail}")
    result = json.loads(lines[-1])
    return int(result["baseline"]), int(result["peak"])


def _probe_main() -> int:
    """The peak-RSS process: read a _Probe on stdin, print {"baseline", "peak"} bytes."""
    probe: _Probe = pickle.load(sys.stdin.buffer)
    baseline = max_rss_bytes()
    runner = _open(probe.target, n_ctx=probe.n_ctx, n_threads=probe.n_threads)
    try:
        for kind, work in (("pp", probe.work.prompt), ("tg", probe.work.decode)):
            if work:
                runner.run(kind, probe.work)
    finally:
        runner.close()
    print(json.dumps({"baseline": baseline, "peak": max_rss_bytes()}))
    return 0


def max_rss_bytes() -> int:
    """This process's resident set size high-water mark, in bytes."""
    try:
        # Linux: VmHWM belongs to this program's own address space. ru_maxrss would also
        # count the parent's pages that the forked child held before exec.
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


# ---------------------------------------------------------------- GGUF size


# GGUF metadata value types with a fixed size: type id -> struct format.
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def gguf_tensor_bytes(path: Union[str, os.PathLike]) -> int:
    """Total bytes of a GGUF file's tensors (llama-bench's model size), from its header.

    Reads only the header; gguf.GGUFReader would parse every vocabulary string into
    numpy fields first, seconds for a real tokenizer.
    """
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    with open(path, "rb") as f:
        reader = _HeaderReader(f)
        if reader.read(4) != b"GGUF":
            raise ValueError(f"not a GGUF file: {path}")
        version, = reader.unpack("<I")
        if version < 2:
            raise ValueError(f"GGUF version {version} is not supported: {path}")
        n_tensors, n_kv = reader.unpack("<QQ")
        for _ in range(n_kv):
            reader.skip_string()
            reader.skip_value(reader.unpack("<I")[0])
        total = 0
        for _ in range(n_tensors):
            reader.skip_string()
            n_dims, = reader.unpack("<I")
            dims = reader.unpack(f"<{n_dims}Q")
            ggml_type, _offset = reader.unpack("<IQ")
            block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
            total += math.prod(dims) // block_size * type_size
    return total


class _HeaderReader:
    """Sequential little-endian reads from a GGUF header, buffered."""

    def __init__(self, f) -> None:
        self._f = f

    def read(self, n: int) -> bytes:
        data = self._f.read(n)
        if len(data) != n:
            raise ValueError("GGUF header ends early")
        return data

    def unpack(self, fmt: str) -> tuple:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))

    def skip_string(self) -> None:
        n, = self.unpack("<Q")
        self._f.seek(n, os.SEEK_CUR)

    def skip_value(self, value_type: int) -> None:
        if value_type in _GGUF_SCALARS:
            self._f.seek(struct.calcsize(_GGUF_SCALARS[value_type]), os.SEEK_CUR)
        elif value_type == _GGUF_STRING:
            self.skip_string()
        elif value_type == _GGUF_ARRAY:
            item_type, n = self.unpack("<IQ")
            if item_type in _GGUF_SCALARS:
                self._f.seek(n * struct.calcsize(_GGUF_SCALARS[item_type]), os.SEEK_CUR)
            else:
                for _ in range(n):
                    self.skip_value(item_type)
        else:
            raise ValueError(f"unknown GGUF value type {value_type}")
