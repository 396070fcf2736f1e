"""river_cpp._cpus: the default thread count on simulated topologies (fake sysfs trees
and /proc/cpuinfo texts), and the OpenMP wait policy set before ggml loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from river_cpp._child import python_command
from river_cpp._cpus import (
    DEFAULT_WAIT,
    TOO_LATE_WARNING,
    ThreadGovernor,
    choose_threads,
    parse_cpu_list,
    read_topology,
    set_wait_policy,
)


def fake_sysfs(root: Path, siblings: dict[int, str], *, capacity=None, atom=None, core=None) -> Path:
    """A /sys with devices/system/cpu/cpuN/topology/thread_siblings_list per CPU."""
    for cpu, text in siblings.items():
        topo = root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "thread_siblings_list").write_text(text + "\n")
        if capacity is not None:
            (topo.parent / "cpu_capacity").write_text(f"{capacity[cpu]}\n")
    if atom is not None:
        for name, cpus in (("cpu_atom", atom), ("cpu_core", core)):
            (root / "devices" / name).mkdir(parents=True)
            (root / "devices" / name / "cpus").write_text(cpus + "\n")
    return root


def test_parse_cpu_list():
    assert parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpu_list("") == set()
    with pytest.raises(ValueError):
        parse_cpu_list("3-1")


def test_smt_siblings_count_once(tmp_path):
    # 4 cores with 2 threads each, siblings numbered n and n+4 (Linux's usual order).
    root = fake_sysfs(tmp_path, {cpu: f"{cpu % 4},{cpu % 4 + 4}" for cpu in range(8)})
    topology = read_topology(sys_root=root, allowed=range(8))
    assert topology.source == "sysfs"
    assert topology.cores == ((0, 4), (1, 5), (2, 6), (3, 7))
    choice = choose_threads(topology)
    assert choice.n_threads == 4
    assert "8 logical CPUs" in choice.reason and "4 physical cores" in choice.reason


def test_affinity_limits_the_cores(tmp_path):
    root = fake_sysfs(tmp_path, {cpu: f"{cpu % 4},{cpu % 4 + 4}" for cpu in range(8)})
    # Allowed: both threads of core 0 and one thread of core 1: two cores.
    assert choose_threads(read_topology(sys_root=root, allowed=[0, 4, 1])).n_threads == 2


def test_intel_hybrid_leaves_out_efficiency_cores(tmp_path):
    # 2 performance cores with SMT (CPUs 0-3), 4 efficiency cores (CPUs 4-7).
    siblings = {0: "0-1", 1: "0-1", 2: "2-3", 3: "2-3", 4: "4", 5: "5", 6: "6", 7: "7"}
    root = fake_sysfs(tmp_path, siblings, atom="4-7", core="0-3")
    topology = read_topology(sys_root=root, allowed=range(8))
    assert topology.efficiency == frozenset({4, 5, 6, 7})
    choice = choose_threads(topology)
    assert choice.n_threads == 2
    assert "4 of them efficiency cores" in choice.reason
    # Pinned to efficiency cores only: those are what there is.
    assert choose_threads(read_topology(sys_root=root, allowed=[4, 5, 6])).n_threads == 3


def test_arm_little_cores_by_capacity(tmp_path):
    # 4 little (capacity 380), 3 big (870) and 1 prime (1024) cores: the big ones count.
    capacity = {0: 380, 1: 380, 2: 380, 3: 380, 4: 870, 5: 870, 6: 870, 7: 1024}
    root = fake_sysfs(tmp_path, {cpu: str(cpu) for cpu in range(8)}, capacity=capacity)
    assert choose_threads(read_topology(sys_root=root, allowed=range(8))).n_threads == 4


CPUINFO = "\n\n".join(
    f"processor\t: {cpu}\nphysical id\t: {cpu // 4}\ncore id\t\t: {cpu % 2}\nflags\t\t: fpu" for cpu in range(8)
)


def test_cpuinfo_where_sysfs_says_nothing(tmp_path):
    # Two sockets of two cores with two threads each: 4 physical cores.
    topology = read_topology(sys_root=tmp_path, cpuinfo=CPUINFO, allowed=range(8))
    assert topology.source == "cpuinfo"
    assert choose_threads(topology).n_threads == 4


def test_no_topology_counts_each_cpu(tmp_path):
    topology = read_topology(sys_root=tmp_path, cpuinfo="", allowed=range(3))
    assert topology.source == "none"
    assert choose_threads(topology).n_threads == 3


def test_user_wait_policy_is_kept():
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    policy = set_wait_policy(env, maps=lambda: "")
    assert env == {"OMP_WAIT_POLICY": "ACTIVE"}
    assert policy.source == "user" and policy.settings == {"OMP_WAIT_POLICY": "ACTIVE"}


def test_wait_policy_set_before_openmp_loads():
    env: dict[str, str] = {}
    policy = set_wait_policy(env, maps=lambda: "7f00-7f01 r-xp 0 0:0 0 /usr/lib/libc.so.6\n")
    assert env == DEFAULT_WAIT and policy.source == "river-cpp"


def test_wait_policy_too_late_changes_nothing():
    env: dict[str, str] = {}
    policy = set_wait_policy(env, maps=lambda: "7f00-7f01 r-xp 0 0:0 0 /usr/lib/libgomp.so.1\n")
    assert env == {} and policy.source == "too late"
    assert "import river_cpp first" in policy.describe()


def test_import_order_in_a_fresh_process():
    # `import river_cpp` then the engine: the policy is set and OpenMP loads after it.
    env = {k: v for k, v in os.environ.items() if k not in DEFAULT_WAIT and k != "OMP_WAIT_POLICY"}
    code = (
        "import river_cpp, os; from river_cpp.engine import _core; from river_cpp._cpus import wait_policy;"
        "print(wait_policy().source, os.environ.get('GOMP_SPINCOUNT'))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["river-cpp", DEFAULT_WAIT["GOMP_SPINCOUNT"]]


@pytest.mark.parametrize("first", ["llama_cpp", "river_cpp"])
def test_a_framework_imported_first_is_warned_of_once(first):
    # An app that imports its framework (and with it llama_cpp, which loads ggml's
    # libgomp) before river_cpp: the runtime has read its wait settings already.
    pytest.importorskip("llama_cpp")
    env = {k: v for k, v in os.environ.items() if k not in DEFAULT_WAIT and k != "OMP_WAIT_POLICY"}
    second = "river_cpp" if first == "llama_cpp" else "llama_cpp"
    code = (
        "import warnings; warnings.simplefilter('always')\n"
        f"import {first}, {second}, importlib, river_cpp._cpus as cpus\n"
        "importlib.reload(river_cpp)  # a second import of the package warns no more\n"
        "print(cpus.wait_policy().source)"
    )
    out = subprocess.run(python_command(code), env=env, capture_output=True, text=True, check=True)
    late = first == "llama_cpp"
    assert out.stdout.strip() == ("too late" if late else "river-cpp")
    assert out.stderr.count("RuntimeWarning") == (1 if late else 0), out.stderr
    assert (TOO_LATE_WARNING in out.stderr) == late


class _FakeProc:
    """/proc/stat and /proc/self/stat as counters a test advances: per second of the
    clock, `others` CPUs busy with other processes and `own` with this one (100 ticks a
    CPU-second, 2 CPUs)."""

    def __init__(self) -> None:
        self.now, self.busy, self.total, self.own = 0.0, 0, 0, 0

    def run(self, seconds: float, *, others: float, own: float) -> None:
        self.now += seconds
        self.total += int(2 * 100 * seconds)
        self.busy += int((others + own) * 100 * seconds)
        self.own += int(own * 100 * seconds)


def _governor(proc: _FakeProc, n_max: int = 2) -> ThreadGovernor:
    return ThreadGovernor(
        n_max,
        cpus=[0, 1],
        read_stat=lambda: (proc.busy, proc.total),
        read_self=lambda: proc.own,
        clock=lambda: proc.now,
    )


def test_threads_give_way_to_a_busy_process_and_come_back():
    proc = _FakeProc()
    governor = _governor(proc)
    assert governor.threads() == 2  # nothing measured yet
    proc.run(1.0, others=0.1, own=1.9)  # idle machine
    assert governor.threads() == 2
    proc.run(1.0, others=0.7, own=1.3)  # a busy process takes its share of the two cores
    assert governor.threads() == 1 and governor.others == pytest.approx(0.7)
    proc.run(0.2, others=0.0, own=1.0)  # sampled at most every half second
    assert governor.threads() == 1
    proc.run(1.0, others=1.0, own=1.0)  # with one thread the busy process has a core
    assert governor.threads() == 1
    proc.run(1.0, others=0.0, own=1.0)  # it ended
    assert governor.threads() == 2


def test_threads_never_exceed_the_cap_nor_drop_below_one():
    proc = _FakeProc()
    governor = _governor(proc, n_max=1)
    governor.threads()
    proc.run(1.0, others=0.0, own=1.0)
    assert governor.threads() == 1
    governor = _governor(proc, n_max=2)
    governor.threads()
    proc.run(1.0, others=2.0, own=0.0)
    assert governor.threads() == 1


def test_without_proc_the_count_stays():
    governor = ThreadGovernor(3, cpus=[0, 1, 2], read_stat=lambda: None, read_self=lambda: None)
    assert governor.threads() == 3 and governor.threads() == 3
