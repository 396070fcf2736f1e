"""river_cpp._cpus: the default thread count on simulated topologies (fake sysfs trees
and /proc/cpuinfo texts), and the OpenMP wait policy set before ggml loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from river_cpp._cpus import (
    DEFAULT_WAIT,
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
