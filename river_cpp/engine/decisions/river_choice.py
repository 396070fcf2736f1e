"""Which river the default builds for a backbone file: the one that pays, or none.

A river drafts a token for a share c of a backbone step; the backbone then verifies k
drafts in one forward of k + 1 positions, V(k + 1) steps (V(1) = 1). With per-token
acceptance a, a round yields 1 + a(1 - a^k)/(1 - a) tokens for k c + V(k + 1) steps,
so a river type can only pay where its best k gives clearly more than one token a
step. That rules the river out on 4-bit files: a 4-bit river reads nearly the bytes of
a Q4_K_M backbone (c near 0.9), and then no acceptance below 1 pays for the verify.

The choice rests on three things, in this order:
- the bytes: each river type's matrices against the backbone's (read from the file's
  tensor table). Decoding one token is bound by memory bandwidth at best, so the bytes
  are the least a drafted token can cost; a type that does not pay at its byte cost
  is never built;
- a short timing, the first time for a file and thread count, cached in the cache
  folder: the backbone's verify curve V(n), and, for a type that passes on bytes, one
  drafted token of the built river (on CPUs the low-bit types decode slower than their
  bytes say). A timing taken while other processes kept the CPUs busy is provisional:
  this process decides on it, the cache does not keep it, and the next process times
  again (a first impression must not hang on what else the machine did for a minute);
- the acceptance each river type reached in measured runs (ACCEPTANCE).

Where no type pays, the default builds and maps no river and drafts from n-gram
matches alone, so the model's memory is the backbone's. choose_river() is the one
place this is decided; RiverModel and the CLI call it where the default river (AUTO)
is resolved, and an explicit river always wins.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from dataclasses import field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

from river_cpp._cpus import CpuTicks, read_cpu_ticks
from river_cpp.engine.compute.load_options import AUTO_RIVER
from river_cpp.engine.decisions.backbone_choice import GRAPH, BackboneChoice, choose_backbone
from river_cpp.engine.decisions.round_cost import best_round
from river_cpp.engine.files.cache import cache_dir, file_identity
from river_cpp.engine.files.gguf_info import read_gguf_info
from river_cpp.engine.files.river import DEFAULT_HEAD_TYPE as HEAD_TYPE  # the lossless preset's head
from river_cpp.engine.files.river import DEFAULT_RIVER_TYPE, RiverSpec, river_cache_path

# The river types the choice weighs, from the best accepted to the cheapest. Each one's
# effective per-token acceptance when drafting with the lossless preset (the round
# ends after an unsure token, Speculative.p_min 0.5), from docs/results.md on the 1.5B
# F16 upcast: IQ4_NL kept 0.83 of its drafts on chat and 0.98 on HumanEval (0.90
# between them); Q3_K and Q2_K rivers kept 0.06 and 0.10 fewer than IQ4_NL on the same
# HumanEval run (0.77-0.79 and 0.73-0.76 against 0.83-0.84, p_min 0).
ACCEPTANCE: dict[str, float] = {"iq4_nl": 0.90, "q3_k": 0.84, "q2_k": 0.80}
# ggml's bits per weight of the types a river may get (block bytes * 8 / block size),
# and their block sizes: a row that is no multiple of a K-quant's 256 gets IQ4_NL
# instead (the river's builder does so: csrc/river_build.cpp, river_type_for_row).
_BITS_PER_WEIGHT = {"iq4_nl": 4.5, "q4_0": 4.5, "q3_k": 3.4375, "q2_k": 2.625}
_BLOCK = {"iq4_nl": 32, "q4_0": 32, "q3_k": 256, "q2_k": 256}
# A river must promise this much over plain decoding at its acceptance: it costs
# memory (half the backbone's bytes or more) and the portfolio's probing, and where
# the promise is close to 1 the estimates' noise decides.
MIN_SPEEDUP = 1.10
# Verify sizes timed: enough to draw the curve through (it steps, then flattens).
VERIFY_SIZES = (1, 2, 4, 6, 9)
# Interleaved passes over the sizes, after one that builds the graphs. Each size keeps
# its fastest pass: other processes only ever slow a forward down, and on a shared
# machine a median of a few still moved a 2-position verify between 0.8 and 3.3 steps.
_TIMING_PASSES = 5
# A timing is provisional where other processes kept more than this share of the CPUs
# busy while it ran. ggml's threads run in lockstep, so a process that takes a core
# now and then stalls every thread: a timing beside a build had V(2) at 2.02 steps and
# the IQ4_NL river at 0.71 of a step on the demo's file, and the choice built no river
# where a quiet machine's timing builds one that keeps 75% of its drafts (issue 48).
# A quarter: a build or a second model beside the timing (40-50% of 2 CPUs on the
# shared host) makes it provisional, a desktop's usual few percent does not hold every
# run to a new timing (10-20 s on the demo's file, a river built to be timed included).
BUSY_SHARE = 0.25
# A span shorter than this many clock ticks of each CPU (0.2 s at Linux's 100 a second)
# says nothing of the load: a tick more or less would be the whole reading.
_MIN_LOAD_TICKS = 20
_CHOICE_VERSION = 2  # bump when what the cache records changes meaning (2: the load and time of the timing)
CACHE_FOLDER = "river-choice"  # under cache_dir(): the timings, one file per backbone and thread count

# Text the timing forwards run on: any tokens do, the cost does not depend on them.
_TIMING_TEXT = (
    "def merge(intervals):\n    intervals.sort()\n    merged = [intervals[0]]\n"
    "    for start, end in intervals[1:]:\n        if start <= merged[-1][1]:\n"
)


@dataclasses.dataclass(frozen=True)
class Timings:
    """What the first timing measured: the verify curve and drafted-token costs, when,
    and how busy other processes kept the CPUs meanwhile."""

    verify: dict[int, float]  # positions -> seconds relative to one position
    draft_cost: dict[str, float] = field(default_factory=dict)  # river type -> a drafted token / a backbone step
    taken: float = 0.0  # when its last part was timed, seconds since the epoch (0: handed in, not timed)
    load: Optional[float] = None  # the most of the CPUs' share other processes kept busy (None: unknown)

    @property
    def quiet(self) -> bool:
        """Whether the machine was quiet enough for the timing to stand as the verdict
        (an unknown load counts as quiet: there is nothing to wait for)."""
        return self.load is None or self.load <= BUSY_SHARE

    def with_costs(self, more: Timings) -> Timings:
        """These timings and `more`'s drafted-token costs, as one record (the later time, the higher load)."""
        loads = [x for x in (self.load, more.load) if x is not None]
        return Timings(
            self.verify,
            {**self.draft_cost, **more.draft_cost},
            max(self.taken, more.taken),
            max(loads) if loads else None,
        )

    def describe(self) -> str:
        """Which timing holds and when it was taken, one line for `river-cpp info MODEL`."""
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.taken))
        if not self.quiet:
            return (
                f"timing: provisional, taken {when} while other processes kept {100 * self.load:.0f}% of the "
                "CPUs busy; used by this process only, not cached: a run on a quiet machine times again"
            )
        machine = "on a quiet machine" if self.load is not None else "(the load during it is unknown)"
        return f"timing: cached, taken {when} {machine}; `river-cpp info MODEL --retime` times again"

    def as_dict(self) -> dict:
        """Which timing holds, as plain data: {"taken" (ISO 8601), "load", "cached"}."""
        taken = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.taken))
        return {"taken": taken, "load": self.load, "cached": self.quiet}

    def verify_cost(self, positions: int) -> float:
        """V(positions): the timed sizes' costs, a line between them, the last step's
        slope past the largest."""
        known = sorted(self.verify)
        if positions in self.verify:
            return self.verify[positions]
        if positions > known[-1]:
            lo, hi = known[-2], known[-1]
            slope = max(self.verify[hi] - self.verify[lo], 0.0) / (hi - lo)
            return self.verify[hi] + slope * (positions - hi)
        lo = max(k for k in known if k < positions)
        hi = min(k for k in known if k > positions)
        return self.verify[lo] + (self.verify[hi] - self.verify[lo]) * (positions - lo) / (hi - lo)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One river type weighed for a backbone."""

    river: str
    acceptance: float
    byte_cost: float  # the river's bytes per drafted token / the backbone's per step
    river_bytes: int  # of the river file's matrices (layers and head)
    timed_cost: Optional[float] = None  # a timed drafted token / a backbone step
    draft: int = 0  # the best round length at `cost`
    speedup: float = 0.0  # the predicted speed over plain decoding at that length

    @property
    def cost(self) -> float:
        return self.byte_cost if self.timed_cost is None else self.timed_cost

    @property
    def pays(self) -> bool:
        return self.speedup >= MIN_SPEEDUP


@dataclasses.dataclass(frozen=True)
class RiverChoice:
    """The default's river for one backbone and thread count, and why."""

    river: Optional[str]  # a river type to build, or None: no river, n-gram drafts alone
    reason: str
    backbone_type: str  # the type most of the backbone's matrix bytes have
    backbone_bytes: int  # matrix bytes a backbone step reads (layers and head)
    candidates: tuple[Candidate, ...] = ()
    timings: Optional[Timings] = None  # what the choice was weighed on

    @property
    def timed(self) -> bool:
        """Whether the choice rests on a timing of this machine (not on timings handed in)."""
        return self.timings is not None and self.timings.taken > 0

    def as_dict(self) -> dict:
        """Plain data (JSON-serializable), for `river-cpp info MODEL --json`."""
        return {
            "river": self.river,
            "reason": self.reason,
            "backbone_type": self.backbone_type,
            "backbone_bytes": self.backbone_bytes,
            "candidates": [dataclasses.asdict(c) for c in self.candidates],
            "timing": self.timings.as_dict() if self.timed else None,
        }

    def describe(self) -> str:
        """Lines for `generate -v` and `river-cpp info MODEL`."""
        chosen = self.river or "none (n-gram drafts only)"
        lines = [f"river: {chosen}: {self.reason}"]
        for c in self.candidates:
            timed = f", timed {c.timed_cost:.2f}" if c.timed_cost is not None else ""
            lines.append(
                f"  {c.river:<7} {c.river_bytes / 2**20:6.0f} MiB, drafted token {c.byte_cost:.2f} of a step by "
                f"bytes{timed}, acceptance {c.acceptance:.2f} -> {c.speedup:.2f}x at {c.draft} drafts"
            )
        if self.timed:
            lines.append("  " + self.timings.describe())
        return "\n".join(lines)


def weigh(
    backbone_type: str,
    backbone_bytes: int,
    river_bytes: Mapping[str, int],
    timings: Timings,
) -> RiverChoice:
    """The choice from the bytes and the timings at hand (pure: no file, no clock).

    A type is chosen when its predicted speedup at its timed cost reaches MIN_SPEEDUP;
    of several, the best accepted (ACCEPTANCE's order), not the fastest predicted: the
    low-bit types' acceptance was measured on an upcast that flatters them, and on the
    1.5B F16 Q2_K, predicted 1.34x against IQ4_NL's 1.29x, ran at 1.47x on three
    input-grounded prompts where IQ4_NL ran at 1.86x. A type that pays on bytes but was
    not timed yet is not chosen, nor any type after it: choose_river times it first."""
    candidates = []
    for river in ACCEPTANCE:
        byte_cost = river_bytes[river] / backbone_bytes
        timed = timings.draft_cost.get(river)
        if timed is not None:
            timed = max(timed, byte_cost)  # bytes are the least a token costs; a faster timing was luck
        acceptance = ACCEPTANCE[river]
        k, speedup = best_round(acceptance, byte_cost if timed is None else timed, timings.verify_cost)
        candidates.append(Candidate(river, acceptance, byte_cost, river_bytes[river], timed, k, speedup))
    # the best accepted type that pays: on bytes where untimed, else timed
    best = next((c for c in candidates if c.pays), None)
    if best is not None and best.timed_cost is not None:
        reason = (
            f"a drafted token costs {best.cost:.2f} of a {backbone_type} backbone step (timed), and at its "
            f"acceptance {best.acceptance:.2f} it promises {best.speedup:.2f}x"
        )
        return RiverChoice(best.river, reason, backbone_type, backbone_bytes, tuple(candidates), timings)
    if best is not None:
        reason = f"{best.river} would be faster than plain decoding by its size, but was not timed yet"
        return RiverChoice(None, reason, backbone_type, backbone_bytes, tuple(candidates), timings)
    cheapest = min(candidates, key=lambda c: c.cost)
    timed = " (timed)" if cheapest.timed_cost is not None else " by bytes"
    reason = (
        f"no river would be faster than plain decoding on this {backbone_type} backbone: the cheapest, "
        f"{cheapest.river}, costs "
        f"{cheapest.cost:.2f} of a step a drafted token{timed}, and a verify of 2 positions "
        f"{timings.verify_cost(2):.2f} steps; at most {max(c.speedup for c in candidates):.2f}x "
        f"predicted, below {MIN_SPEEDUP:.2f}x"
    )
    return RiverChoice(None, reason, backbone_type, backbone_bytes, tuple(candidates), timings)


def choose_river(
    model_path: Union[str, os.PathLike],
    *,
    n_threads: int,
    timer: Optional[Callable[..., Timings]] = None,
    retime: bool = False,
    cpu_ticks: Callable[[], Optional[CpuTicks]] = read_cpu_ticks,
) -> RiverChoice:
    """The river the default builds for the backbone at `model_path` on `n_threads`
    threads (see the module's docstring). Times the backbone, and the river types that
    pay on bytes from the best accepted down until one still pays once timed, the first
    time (seconds; a river type timed is built, and deleted again when it is not
    chosen), then reads the timings from the cache folder.

    timer(model_path, river_types, n_threads=) -> Timings measures; the default is
    time_costs. cpu_ticks() reads the CPUs' clock ticks before and after each timing
    (river_cpp._cpus.read_cpu_ticks): a timing during which other processes kept more
    than BUSY_SHARE of the CPUs busy is provisional, used by this process (and kept for
    its later calls) but not cached, so the next process times again. The cache is
    keyed by the file's identity, the thread count and the CPU's extra buffer types in
    use. retime: time again instead of reading the cache or this process's provisional
    timing (`river-cpp info MODEL --retime` asks for this)."""
    path = Path(model_path)
    backbone_type, backbone_bytes, river_bytes = file_bytes(path)
    timer = timer or time_costs
    cache = _cache_path(path, n_threads)
    identity = file_identity(path)
    timings = _backbone_timings(path, cache, identity, n_threads, timer, retime, cpu_ticks)
    built = []  # rivers built here to be timed
    while True:
        choice = weigh(backbone_type, backbone_bytes, river_bytes, timings)
        # weigh names no river while the best accepted type that pays is untimed
        untimed = next((c for c in choice.candidates if c.pays and c.timed_cost is None), None)
        if choice.river is not None or untimed is None:
            for river in built:
                if river != choice.river:
                    _forget_river(path, river)  # built to be timed, not chosen: "builds and maps none"
            return choice
        river = untimed.river
        timings = timings.with_costs(_timed(timer, path, (river,), n_threads, cpu_ticks))
        _keep(cache, identity, timings)
        built.append(river)


def backbone_timings(
    model_path: Union[str, os.PathLike],
    *,
    n_threads: int,
    timer: Optional[Callable[..., Timings]] = None,
    retime: bool = False,
    cpu_ticks: Callable[[], Optional[CpuTicks]] = read_cpu_ticks,
) -> Timings:
    """The backbone's verify curve on `n_threads` threads (with whatever river costs are
    cached beside it): this process's provisional timing or the cache's, else timed now
    and kept (choose_river's first step; river_cpp.engine.decisions.parallel_choice reads it too)."""
    path = Path(model_path)
    return _backbone_timings(
        path, _cache_path(path, n_threads), file_identity(path), n_threads, timer or time_costs, retime, cpu_ticks
    )


def _backbone_timings(
    path: Path,
    cache: Path,
    identity: dict,
    n_threads: int,
    timer: Callable[..., Timings],
    retime: bool,
    cpu_ticks: Callable[[], Optional[CpuTicks]],
) -> Timings:
    timings = None if retime else _provisional_timings(cache, identity) or _read_cache(cache, identity)
    if timings is None:
        timings = _timed(timer, path, (), n_threads, cpu_ticks)
        _keep(cache, identity, timings)
    return timings


def _timed(
    timer: Callable[..., Timings],
    path: Path,
    river_types: Sequence[str],
    n_threads: int,
    cpu_ticks: Callable[[], Optional[CpuTicks]],
) -> Timings:
    """timer's Timings, stamped with the time and the share of the CPUs other processes
    kept busy while it ran (None where the ticks cannot be read or the span was too
    short to tell)."""
    before = cpu_ticks()
    timings = timer(path, river_types, n_threads=n_threads)
    after = cpu_ticks()
    load = None
    if before is not None and after is not None and after.ticks_per_cpu_since(before) >= _MIN_LOAD_TICKS:
        others = after.others_since(before)
        load = None if others is None else others / after.n_cpus
    return dataclasses.replace(timings, taken=time.time(), load=load)


def file_bytes(path: Path) -> tuple[str, int, dict[str, int]]:
    """(the backbone's main matrix type, its matrix bytes a step reads, each weighed
    river type's matrix bytes with a HEAD_TYPE head) from the file's tensor table."""
    from river_cpp.engine.files.weight_bytes import WeightBytes  # reads the table; no model

    info = read_gguf_info(path)
    weights = WeightBytes.of_files(path)
    by_type: dict[str, int] = {}
    head = info.tensor("output.weight") or info.tensor("token_embd.weight")
    matrices = [t for t in info.tensors if t.name.startswith("blk.") and len(t.shape) >= 2]
    if not matrices or head is None:
        raise ValueError(f"{path} has no layer matrices or no LM head to weigh a river against")
    for tensor in matrices:
        by_type[tensor.type] = by_type.get(tensor.type, 0) + tensor.n_bytes
    rivers = {
        river: int(sum(_river_bytes(t.shape, river) for t in matrices) + _river_bytes(head.shape, HEAD_TYPE))
        for river in ACCEPTANCE
    }
    return max(by_type, key=by_type.get).upper(), weights.full_backbone(), rivers


def _river_bytes(shape: Sequence[int], river: str) -> float:
    """Bytes of a matrix of `shape` (ggml order: the row first) in a river of type `river`."""
    kind = river if shape[0] % _BLOCK[river] == 0 else "iq4_nl"
    return _elements(shape) * _BITS_PER_WEIGHT[kind] / 8


def _elements(shape: Sequence[int]) -> int:
    n = 1
    for dim in shape:
        n *= int(dim)
    return n


# ---------------------------------------------------------------- timing


def time_costs(path: Path, river_types: Sequence[str], *, n_threads: int) -> Timings:
    """Time the backbone's verify curve (no river types) or one drafted token of each
    of `river_types` (building each river, as the default would), relative to a
    backbone step of the same model, in interleaved passes."""
    from river_cpp.engine.compute.graph_backbone import GraphBackbone
    from river_cpp.engine.compute.load_options import LoadOptions
    from river_cpp.engine.compute.policy import ExitPolicy

    options = LoadOptions(n_ctx=64, n_threads=n_threads, progress=False, river=None)
    if not river_types:
        with GraphBackbone(str(path), options) as model:
            context = _context(model)
            seconds = _interleaved(model, context, {n: dict(n=n, route="backbone") for n in VERIFY_SIZES})
        curve, most = {}, 1.0
        for n in VERIFY_SIZES:  # more positions never cost less: what did was noise
            most = curve[n] = max(most, seconds[n] / seconds[1])
        return Timings(curve)
    costs = {}
    on_river = ExitPolicy.at_layer(0)  # a river draft's forward
    for river in river_types:
        with GraphBackbone(str(path), options.replace(river=river, river_head=HEAD_TYPE)) as model:
            context = _context(model)
            runs = {"backbone": dict(n=1, route="backbone"), "river": dict(n=1, route="decode", policy=on_river)}
            seconds = _interleaved(model, context, runs)
        costs[river] = seconds["river"] / seconds["backbone"]
    return Timings({1: 1.0}, costs)


def _context(model) -> list[int]:
    ids = model.tokenize(_TIMING_TEXT)
    model.forward(ids[:8], route="backbone")
    return ids[8 : 8 + max(VERIFY_SIZES)]


def _interleaved(model, ids: list[int], runs: Mapping[object, dict]) -> dict[object, float]:
    """The fastest seconds of each run's forward, after a first pass that builds the graphs."""
    start = model.n_past
    times: dict[object, list[float]] = {name: [] for name in runs}
    for timed_pass in range(_TIMING_PASSES + 1):
        for name, run in runs.items():
            model.rewind(start)
            began = time.perf_counter()
            model.forward(ids[: run["n"]], route=run["route"], policy=run.get("policy"))
            if timed_pass:
                times[name].append(time.perf_counter() - began)
    model.rewind(start)
    return {name: min(seconds) for name, seconds in times.items()}


# ---------------------------------------------------------------- the cache


def _cache_path(path: Path, n_threads: int) -> Path:
    from river_cpp.engine.probes.extra_bufts import extra_bufts
    from river_cpp.engine.probes.own_products import own_products

    # timings hold for the products that made them: the layouts and our own kernels
    key = f"{path.resolve()}|{n_threads}|{','.join(extra_bufts().allowed)}|own:{own_products().kernels}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_dir() / CACHE_FOLDER / f"{path.stem}-{digest}.json"


def _read_cache(cache: Path, identity: dict) -> Optional[Timings]:
    try:
        recorded = json.loads(cache.read_text())
        if recorded["version"] != _CHOICE_VERSION or recorded["identity"] != identity:
            return None
        return Timings(
            {int(n): float(v) for n, v in recorded["verify"].items()},
            dict(recorded["draft_cost"]),
            float(recorded["taken"]),
            None if recorded["load"] is None else float(recorded["load"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cache(cache: Path, identity: dict, timings: Timings) -> None:
    cache.parent.mkdir(parents=True, exist_ok=True)
    recorded = {
        "version": _CHOICE_VERSION,
        "identity": identity,
        "verify": timings.verify,
        "draft_cost": timings.draft_cost,
        "taken": timings.taken,
        "load": timings.load,
    }
    tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(recorded, indent=1) + "\n")
    os.replace(tmp, cache)


# This process's provisional timings (taken on a busy machine), by cache file: its
# later choices for the same file and thread count use them rather than time again.
_provisional: dict[Path, tuple[dict, Timings]] = {}


def _provisional_timings(cache: Path, identity: dict) -> Optional[Timings]:
    kept = _provisional.get(cache)
    return kept[1] if kept is not None and kept[0] == identity else None


def _keep(cache: Path, identity: dict, timings: Timings) -> None:
    """Cache quiet timings as the verdict; keep a busy machine's for this process only."""
    if timings.quiet:
        _write_cache(cache, identity, timings)
        _provisional.pop(cache, None)
    else:
        _provisional[cache] = (identity, timings)


def _forget_river(path: Path, river: str) -> None:
    """Delete the river file of `river` built only to be timed."""
    river_cache_path(path, RiverSpec(default_type=river, head_type=HEAD_TYPE)).unlink(missing_ok=True)


def resolve_river(
    model_path: Union[str, os.PathLike],
    river: Union[str, os.PathLike, None],
    *,
    n_threads: int,
    exits: bool = False,
) -> tuple[Union[str, os.PathLike, None], Optional[RiverChoice]]:
    """(the river to load, the choice that named it): AUTO_RIVER is choose_river's
    choice, or DEFAULT_RIVER_TYPE where the model's decoding `exits` (a lossy policy
    runs tokens on the river whether drafting pays or not); any other value, the
    caller's own, as given (with no choice)."""
    if isinstance(river, str) and river.lower() == AUTO_RIVER:
        if exits:
            return DEFAULT_RIVER_TYPE, None
        choice = choose_river(model_path, n_threads=n_threads)
        return choice.river, choice
    return river, None


def resolve_backbone_river(
    model_path: Union[str, os.PathLike],
    river: Union[str, os.PathLike, None],
    *,
    engine: str = "auto",
    n_threads: int,
    exits: bool = False,
) -> tuple[BackboneChoice, Union[str, os.PathLike, None], Optional[RiverChoice]]:
    """(the backbone, the river to load, the choice that named it) of a model: on the
    graph, resolve_river's; on llama.cpp's backbone, AUTO_RIVER means none (it has no
    river), and any other value is returned for the model to refuse."""
    backbone = choose_backbone(model_path, engine)
    if backbone.kind != GRAPH:
        return backbone, None if isinstance(river, str) and river.lower() == AUTO_RIVER else river, None
    river, choice = resolve_river(model_path, river, n_threads=n_threads, exits=exits)
    return backbone, river, choice
