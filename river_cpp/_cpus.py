"""The CPU threads a run uses by default, and how they wait, without loading the engine
(the CLI's parsers declare the default before anything heavy is imported; the wait
policy must be in the environment before OpenMP loads with ggml).

Reads the topology only (Linux sysfs, else /proc/cpuinfo); does not pin threads.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Mapping, MutableMapping, Optional

# Settings OpenMP runtimes read once, when they load: libgomp (GCC) and libomp (LLVM).
OPENMP_WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
# What river-cpp sets where the user set none: ggml's OpenMP threads wait at each
# barrier; a thread that spins long burns the core a working thread (ours, or another
# process's) needs. A short spin, then sleep (docs/results.md, "Threads under load").
# 1,000 spins kept the idle speed (1.01x libgomp's own 300,000) and lifted the speed
# beside a busy process from 0.27 to 0.41 of idle; OMP_WAIT_POLICY=PASSIVE lifted it to
# 0.84 but cost 36% idle (1.5B Q4_K_M, 2 threads, AMD EPYC 2 cores: docs/results.md).
DEFAULT_WAIT = {"GOMP_SPINCOUNT": "1000", "KMP_BLOCKTIME": "0"}


# ---------------------------------------------------------------------------------------
# Topology
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuTopology:
    """The logical CPUs this process may use, grouped into physical cores.

    cores: one tuple of allowed logical CPUs per physical core (SMT siblings together);
    efficiency: the allowed logical CPUs known to be efficiency cores (Intel's hybrid
    "atom" cores; on Arm, cores below half the largest capacity); source: where the
    grouping came from ("sysfs", "cpuinfo", or "none": each CPU its own core).
    """

    allowed: tuple[int, ...]
    cores: tuple[tuple[int, ...], ...]
    efficiency: frozenset[int]
    source: str

    @property
    def performance_cores(self) -> tuple[tuple[int, ...], ...]:
        """The physical cores none of whose CPUs is an efficiency core."""
        return tuple(core for core in self.cores if not self.efficiency.intersection(core))


def parse_cpu_list(text: str) -> set[int]:
    """A kernel CPU list ("0-3,8,10-11") as a set of CPU numbers; ValueError if malformed."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        first, dash, last = part.partition("-")
        if dash:
            lo, hi = int(first), int(last)
            if hi < lo:
                raise ValueError(f"CPU range {part!r} runs backwards")
            cpus.update(range(lo, hi + 1))
        else:
            cpus.add(int(first))
    return cpus


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _allowed_cpus() -> tuple[int, ...]:
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return tuple(range(os.cpu_count() or 1))


def read_topology(
    *,
    sys_root: Path | str = "/sys",
    cpuinfo: Optional[str] = None,
    allowed: Optional[Iterable[int]] = None,
) -> CpuTopology:
    """This machine's topology, or a simulated one: `sys_root` is the folder that holds
    devices/system/cpu (a fake tree in tests), `cpuinfo` the text of /proc/cpuinfo
    (None: read it where sysfs says nothing), `allowed` the CPUs this process may run on
    (None: its affinity mask)."""
    allowed_cpus = tuple(sorted(set(_allowed_cpus() if allowed is None else allowed)))
    root = Path(sys_root)
    cpu_dir = root / "devices" / "system" / "cpu"

    # Physical cores: logical CPUs that list the same siblings share a core.
    core_of: dict[int, str] = {}
    for cpu in allowed_cpus:
        topo = cpu_dir / f"cpu{cpu}" / "topology"
        siblings = _read(topo / "core_cpus_list") or _read(topo / "thread_siblings_list")
        if siblings is None:
            break
        package = (_read(topo / "physical_package_id") or "").strip()
        core_of[cpu] = f"{package}:{siblings.strip()}"
    source = "sysfs"
    if len(core_of) < len(allowed_cpus):
        core_of = _cores_from_cpuinfo(cpuinfo if cpuinfo is not None else _read(Path("/proc/cpuinfo")) or "")
        core_of = {cpu: key for cpu, key in core_of.items() if cpu in allowed_cpus}
        source = "cpuinfo"
        if len(core_of) < len(allowed_cpus):
            core_of = {cpu: str(cpu) for cpu in allowed_cpus}
            source = "none"
    groups: dict[str, list[int]] = {}
    for cpu in allowed_cpus:
        groups.setdefault(core_of[cpu], []).append(cpu)
    cores = tuple(tuple(group) for group in sorted(groups.values()))
    return CpuTopology(allowed_cpus, cores, _efficiency_cpus(root, cpu_dir, allowed_cpus), source)


def _cores_from_cpuinfo(text: str) -> dict[int, str]:
    """processor -> "physical id:core id" from /proc/cpuinfo; CPUs without a core id are left out."""
    cores: dict[int, str] = {}
    for block in text.split("\n\n"):
        fields = {}
        for line in block.splitlines():
            name, colon, value = line.partition(":")
            if colon:
                fields[name.strip()] = value.strip()
        if "processor" in fields and "core id" in fields:
            try:
                cores[int(fields["processor"])] = f"{fields.get('physical id', '0')}:{fields['core id']}"
            except ValueError:
                continue
    return cores


def _efficiency_cpus(root: Path, cpu_dir: Path, allowed: tuple[int, ...]) -> frozenset[int]:
    # Intel hybrid: the kernel gives the efficiency cores their own PMU, cpu_atom.
    atom = _read(root / "devices" / "cpu_atom" / "cpus")
    if atom is not None and _read(root / "devices" / "cpu_core" / "cpus") is not None:
        try:
            return frozenset(parse_cpu_list(atom) & set(allowed))
        except ValueError:
            return frozenset()
    # Arm big.LITTLE: each CPU's relative capacity; little cores sit far below the big ones.
    capacity: dict[int, int] = {}
    for cpu in allowed:
        text = _read(cpu_dir / f"cpu{cpu}" / "cpu_capacity")
        if text is None or not text.strip().isdigit():
            return frozenset()
        capacity[cpu] = int(text)
    largest = max(capacity.values(), default=0)
    return frozenset(cpu for cpu, value in capacity.items() if 2 * value < largest)


# ---------------------------------------------------------------------------------------
# The default thread count
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ThreadChoice:
    """The default thread count and why (`river-cpp info` prints both)."""

    n_threads: int
    reason: str


def choose_threads(topology: CpuTopology) -> ThreadChoice:
    """One thread per physical performance core this process may use: SMT siblings
    share a core's arithmetic units and efficiency cores fall behind the lockstep of
    ggml's threads, so neither adds speed (llama.cpp's default counts the same way)."""
    n_allowed = len(topology.allowed)
    performance = topology.performance_cores
    n_cores = len(topology.cores)
    if not performance:  # only efficiency cores allowed: use them
        return ThreadChoice(max(1, n_cores), f"{n_cores} physical cores, all efficiency cores ({topology.source})")
    parts = [f"{n_allowed} logical CPUs allowed", f"{n_cores} physical cores ({topology.source})"]
    if len(performance) < n_cores:
        parts.append(f"{n_cores - len(performance)} of them efficiency cores")
    reason = "one thread per physical performance core: " + ", ".join(parts)
    return ThreadChoice(len(performance), reason)


@lru_cache(maxsize=1)
def default_thread_choice() -> ThreadChoice:
    """choose_threads() on this machine, read once per process."""
    return choose_threads(read_topology())


def default_n_threads() -> int:
    """The physical performance cores this process may use (see choose_threads)."""
    return default_thread_choice().n_threads


def n_threads_or_default(n_threads: Optional[int]) -> int:
    """`n_threads` as given, or default_n_threads() for None: the one place every
    option that may leave the thread count open resolves it."""
    return default_n_threads() if n_threads is None else n_threads


# ---------------------------------------------------------------------------------------
# How OpenMP threads wait
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WaitPolicy:
    """How ggml's OpenMP threads wait at barriers in this process.

    settings: the variables in effect (name -> value); source: "river-cpp" (the package
    set DEFAULT_WAIT), "user" (the environment set one of OPENMP_WAIT_VARIABLES; left as
    it was), or "too late" (an OpenMP runtime was loaded before river_cpp was imported,
    so nothing set now applies: import river_cpp before llama_cpp).
    """

    settings: Mapping[str, str]
    source: str

    def describe(self) -> str:
        """One line for `river-cpp info`."""
        shown = " ".join(f"{k}={v}" for k, v in self.settings.items()) or "the runtime's defaults"
        why = {
            "river-cpp": "set by river-cpp: a short spin, then sleep, so a waiting thread yields its core",
            "user": "set in the environment, left as it is",
            "too late": "OpenMP was loaded before river_cpp was imported; import river_cpp first",
        }[self.source]
        return f"{shown} ({why})"


# What wait_policy() warns, once, when an OpenMP runtime loaded first (a framework that
# imports llama_cpp loads ggml's): that runtime read its wait settings as it loaded, and
# neither libgomp nor libomp takes new ones later (libgomp has no call for its spin count).
TOO_LATE_WARNING = (
    "river_cpp was imported after an OpenMP runtime had loaded (llama_cpp loads ggml's; a framework "
    "imported first imports llama_cpp), so ggml's threads keep that runtime's long spin at each barrier "
    "instead of river-cpp's short one, and run several times slower beside another busy process. "
    "Import river_cpp before the framework, or set "
    + " ".join(f"{k}={v}" for k, v in DEFAULT_WAIT.items())
    + " in the environment before Python starts"
)


def _openmp_loaded(maps: Callable[[], Optional[str]]) -> bool:
    text = maps() or ""
    return any(name in text for name in ("libgomp", "libomp", "libiomp"))


def set_wait_policy(
    environ: Optional[MutableMapping[str, str]] = None,
    *,
    maps: Callable[[], Optional[str]] = lambda: _read(Path("/proc/self/maps")),
) -> WaitPolicy:
    """Put DEFAULT_WAIT into `environ` (os.environ) unless the user set any of
    OPENMP_WAIT_VARIABLES, and say what holds. Must run before ggml's OpenMP runtime
    loads (river_cpp/__init__.py calls it first); `maps` reads /proc/self/maps, to tell
    whether a runtime is already loaded."""
    env = os.environ if environ is None else environ
    given = {name: env[name] for name in OPENMP_WAIT_VARIABLES if name in env}
    if given:
        inherited = given == DEFAULT_WAIT  # a river-cpp parent process set them
        return WaitPolicy(given, "river-cpp" if inherited else "user")
    if _openmp_loaded(maps):
        return WaitPolicy({}, "too late")
    env.update(DEFAULT_WAIT)
    return WaitPolicy(dict(DEFAULT_WAIT), "river-cpp")


_wait_policy: Optional[WaitPolicy] = None


def wait_policy() -> WaitPolicy:
    """The wait policy this process runs under (set once, at `import river_cpp`); a
    RuntimeWarning says what to do when OpenMP loaded before it could be set."""
    global _wait_policy
    if _wait_policy is None:
        _wait_policy = set_wait_policy()
        if _wait_policy.source == "too late":
            warnings.warn(TOO_LATE_WARNING, RuntimeWarning, stacklevel=2)
    return _wait_policy


# ---------------------------------------------------------------------------------------
# Threads that follow the machine's load
# ---------------------------------------------------------------------------------------


def _read_proc_stat(cpus: frozenset[int]) -> Optional[tuple[int, int]]:
    """(busy, total) clock ticks of the CPUs `cpus` since boot, from /proc/stat."""
    text = _read(Path("/proc/stat"))
    if text is None:
        return None
    busy = total = 0
    for line in text.splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        ticks = [int(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal
        total += sum(ticks)
        busy += sum(ticks) - ticks[3] - ticks[4]
    return busy, total


def _read_self_ticks() -> Optional[int]:
    """User plus system clock ticks of this process (all its threads), from /proc/self/stat."""
    text = _read(Path("/proc/self/stat"))
    if text is None:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of the file)


@dataclass(frozen=True)
class CpuTicks:
    """Clock ticks since boot: `busy` and `total` summed over the `n_cpus` CPUs this
    process may use, and `own`, this process's (all its threads)."""

    n_cpus: int
    busy: int
    total: int
    own: int

    def others_since(self, earlier: CpuTicks) -> Optional[float]:
        """CPUs other processes kept busy on average from `earlier` to this reading
        (None: no tick passed between the two)."""
        if self.total <= earlier.total:
            return None
        share = self.n_cpus / (self.total - earlier.total)  # CPUs per tick of all the CPUs together
        return max(0.0, ((self.busy - earlier.busy) - (self.own - earlier.own)) * share)

    def ticks_per_cpu_since(self, earlier: CpuTicks) -> float:
        """Clock ticks each CPU counted from `earlier` to this reading (how long the span was)."""
        return (self.total - earlier.total) / max(1, self.n_cpus)


def read_cpu_ticks(cpus: Optional[Iterable[int]] = None) -> Optional[CpuTicks]:
    """CpuTicks now, of `cpus` (None: the CPUs this process may use), from /proc/stat
    and /proc/self/stat; None where either cannot be read."""
    allowed = frozenset(_allowed_cpus() if cpus is None else cpus)
    stat, own = _read_proc_stat(allowed), _read_self_ticks()
    if stat is None or own is None:
        return None
    return CpuTicks(len(allowed), *stat, own)


class ThreadGovernor:
    """The thread count of the next forwards: at most `n_max`, one fewer for each CPU
    that other processes kept busy over the last `interval` seconds (rounded), at
    least one. ggml's threads work in lockstep: beside a busy process, a thread that
    must wait for its core stalls every other thread at the next barrier, and on 2
    cores plain decoding fell to 0.27-0.41 of its idle speed with 2 threads, where
    1 thread kept 0.62. Reads /proc/stat and /proc/self/stat (or the readers given,
    for tests); where they are missing it always answers n_max.
    """

    def __init__(
        self,
        n_max: int,
        *,
        cpus: Optional[Iterable[int]] = None,
        interval: float = 0.5,
        read_stat: Optional[Callable[[], Optional[tuple[int, int]]]] = None,
        read_self: Callable[[], Optional[int]] = _read_self_ticks,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.n_max = max(1, int(n_max))
        allowed = frozenset(_allowed_cpus() if cpus is None else cpus)
        self._n_cpus = len(allowed)
        self._read_stat = read_stat if read_stat is not None else (lambda: _read_proc_stat(allowed))
        self._read_self, self._clock, self.interval = read_self, clock, interval
        self._last: Optional[tuple[float, CpuTicks]] = None
        self.n_threads = self.n_max
        self.others = 0.0  # CPUs other processes kept busy over the last interval

    def threads(self) -> int:
        """The thread count to run with now (sampled at most once per interval)."""
        now = self._clock()
        if self._last is not None and now - self._last[0] < self.interval:
            return self.n_threads
        stat, own = self._read_stat(), self._read_self()
        if stat is None or own is None:
            return self.n_threads
        ticks = CpuTicks(self._n_cpus, *stat, own)
        others = ticks.others_since(self._last[1]) if self._last is not None else None
        if others is not None:
            self.others = others
            self.n_threads = max(1, min(self.n_max, round(self._n_cpus - others)))
        self._last = (now, ticks)
        return self.n_threads
