"""Peak resident memory of one configuration, measured in a fresh Python process.

One process's high-water mark cannot be split between the models it holds, so each
configuration is loaded alone in a child that runs each test once (see
river_cpp.measure.bench). Owns the child's protocol and the RSS reading only.
"""

from __future__ import annotations

import json
import pickle
import resource
import subprocess
import sys
from dataclasses import dataclass

from river_cpp._child import python_command
from river_cpp.measure.bench.runners import Target, Work, open_runner


@dataclass(frozen=True)
class _Probe:
    target: Target
    n_ctx: int
    n_threads: int
    work: Work


def probe_peak_rss(target: Target, *, n_ctx: int, n_threads: int, work: Work) -> tuple[int, int]:
    """(RSS high-water mark before loading, after running each test once) of a fresh
    Python process that holds this configuration alone."""
    command = python_command("from river_cpp.measure.bench.rss import _probe_main; sys.exit(_probe_main())")
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
    runner = open_runner(probe.target, n_ctx=probe.n_ctx, n_threads=probe.n_threads)
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
