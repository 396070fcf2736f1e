"""Which of the CPU's extra buffer types (ggml's AMX, CPU_REPACK, ...) this host may use.

An extra buffer type keeps weights in a layout its own matmul kernels read faster. On
some hosts one of them faults and takes the process with it (ggml's AMX kernels in some
VMs: the kernel grants the tile permission, the first tile instruction faults). So a
type is used only once a probe has shown it works here: for each candidate a
short-lived child process (this module's child_main, importing the same river_cpp as
this process whatever its working folder holds: river_cpp._child) multiplies small
matrices of each weight type the candidate takes, through it and through the plain CPU
layout, and this process compares the two. A crash, a timeout, a failure or a wrong
result marks the candidate unusable. Verdicts about the type (a crash, a wrong or a
right result) are cached in the cache folder, keyed by CPU model, kernel release and
ggml version, so the probe runs once per host; a child that failed to run or timed
out is no verdict on the host, and the next process probes again.

Does not choose tensors or layouts (the engine, csrc/cpu_layout.*, does that within the
allowed set) and does not load models.

``RIVER_CPP_EXTRA_BUFTS`` overrides the probe: ``auto`` (default: the types the probe
passed), ``none``, ``repack`` (CPU_REPACK alone, unprobed) or ``all`` (every type,
unprobed: ggml's own behaviour).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from river_cpp._child import python_command

ENV = "RIVER_CPP_EXTRA_BUFTS"
MODES = ("auto", "none", "repack", "all")
REPACK = "CPU_REPACK"

# Weight types the probe multiplies (each one the candidate takes): the river's types and
# those of common quantized backbones.
PROBE_TYPES = ("q4_0", "q4_1", "q8_0", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs")
# A shape every extra type takes (AMX wants output rows in multiples of 32 and rows of a
# multiple of 256 for k-quants); one token (decode kernels) and a batch (prefill kernels).
PROBE_N_OUT, PROBE_N_IN, PROBE_BATCHES = 64, 512, (1, 17)
PROBE_TIMEOUT_S = 60.0
# Relative error allowed between an extra type's product and the plain one: both quantize
# the activations alike, so they differ by summation order (about 1e-6); a broken kernel
# is off by order 1.
TOLERANCE = 1e-2

ChildCommand = Callable[[str], Sequence[str]]


@dataclass(frozen=True)
class Verdict:
    """The probe's finding on one extra buffer type."""

    usable: bool
    reason: str  # "ok: q4_0, q8_0", "crashed (SIGSEGV)", "timed out after 60 s", ...
    # Whether the finding is about the type rather than this moment: a timeout (a busy
    # machine) or a child that failed to run is not cached, the next process probes again.
    lasting: bool = True


@dataclass(frozen=True)
class ExtraBufts:
    """The extra buffer types this process uses, and why."""

    mode: str  # one of MODES
    available: tuple[str, ...]  # the CPU device's extra types, in ggml's order of preference
    allowed: tuple[str, ...]
    verdicts: Mapping[str, Verdict] = field(default_factory=dict)  # the probe's, in "auto" mode

    def why_not(self, name: str) -> str:
        """Why `name` is not allowed ("" when it is)."""
        if name in self.allowed:
            return ""
        if name in self.verdicts:
            return f"{name} failed the probe: {self.verdicts[name].reason}"
        return f"{name} is off ({ENV}={self.mode})"

    def llama_cpp_note(self) -> Optional[str]:
        """None when llama.cpp may use every extra type (its default); otherwise why it
        must load with use_extra_bufts=False, which turns them all off, its repacked
        layouts included (llama.cpp cannot keep some of them)."""
        refused = [self.why_not(name) for name in self.available if name not in self.allowed]
        if not refused:
            return None
        return "llama.cpp ran without extra buffer types (no repacked layouts): " + "; ".join(refused)


def mode_from_env() -> str:
    """The mode RIVER_CPP_EXTRA_BUFTS asks for ("auto" when unset); ValueError for others."""
    mode = os.environ.get(ENV, "").strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"{ENV} must be one of {', '.join(MODES)}, got {os.environ[ENV]!r}")
    return mode


# ---------------------------------------------------------------- the decision

_verdicts_in_process: dict[str, dict[str, Verdict]] = {}


def extra_bufts(mode: Optional[str] = None, *, reprobe: bool = False) -> ExtraBufts:
    """The extra buffer types to use: by `mode` (default: mode_from_env()); in "auto"
    mode those that passed the probe, probing (once per host, then cached) as needed.
    reprobe: probe again even if a verdict is cached."""
    from river_cpp.engine import _core

    mode = mode_from_env() if mode is None else mode
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    available = tuple(_core.cpu_extra_buffer_types())
    if mode == "none":
        return ExtraBufts(mode, available, ())
    if mode == "repack":
        return ExtraBufts(mode, available, tuple(n for n in available if n == REPACK))
    if mode == "all":
        return ExtraBufts(mode, available, available)
    verdicts = cached_probe(available, cache_key(), reprobe=reprobe)
    return ExtraBufts(mode, available, tuple(n for n in available if verdicts[n].usable), verdicts)


def cached_probe(
    names: Sequence[str],
    key: Mapping[str, str],
    *,
    reprobe: bool = False,
    command: Optional[ChildCommand] = None,
    timeout_s: float = PROBE_TIMEOUT_S,
    folder: str = "extra_bufts",
) -> dict[str, Verdict]:
    """Verdicts on `names`: from this process's memory, else the cache file for `key`
    in the cache's `folder`, else probed (and stored there when lasting)."""
    path = cache_path(key, folder)
    memo = key_digest(key)
    verdicts = {} if reprobe else dict(_verdicts_in_process.get(memo) or read_verdicts(path))
    missing = [name for name in names if name not in verdicts]
    if missing:
        verdicts.update(probe(missing, command=command, timeout_s=timeout_s))
        write_verdicts(path, key, verdicts)
    _verdicts_in_process[memo] = verdicts
    return {name: verdicts[name] for name in names}


# ---------------------------------------------------------------- the probe (parent)


def probe(
    names: Sequence[str], *, command: Optional[ChildCommand] = None, timeout_s: float = PROBE_TIMEOUT_S
) -> dict[str, Verdict]:
    """Run the probe child of each of `names` and judge it. `command(name)` is the
    child's command line (default: this interpreter running this module)."""
    command = command or _child_command
    verdicts = {}
    for name in names:
        try:
            done = subprocess.run(
                list(command(name)), capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            verdicts[name] = Verdict(False, f"timed out after {timeout_s:g} s", lasting=False)
            continue
        verdicts[name] = judge(done.returncode, done.stdout, done.stderr)
    return verdicts


def _child_command(name: str) -> list[str]:
    return python_command("from river_cpp.engine.probes.extra_bufts import child_main; child_main()", name)


def judge(returncode: int, stdout: str, stderr: str) -> Verdict:
    """The verdict on one child: its exit status and its report (the last line of
    stdout, JSON: {"products": [{"type", "plain", "extra"}, ...]})."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return Verdict(False, f"crashed ({name})")
    if returncode != 0:
        last = stderr.strip().splitlines()[-1:] or [f"exit status {returncode}"]
        return Verdict(False, f"failed: {last[0]}", lasting=False)
    try:
        products = json.loads((stdout.strip().splitlines() or [""])[-1])["products"]
        checked = []
        for product in products:
            plain = np.asarray(product["plain"], dtype=np.float64)
            extra = np.asarray(product["extra"], dtype=np.float64)
            error = relative_error(plain, extra)
            if not error <= TOLERANCE:
                return Verdict(False, f"wrong result for {product['type']}: relative error {error:.3g}")
            checked.append(product["type"])
    except (ValueError, KeyError, TypeError) as error:
        return Verdict(False, f"unreadable report ({error})", lasting=False)
    if not checked:
        return Verdict(False, "multiplies none of the probed types")
    return Verdict(True, "ok: " + ", ".join(dict.fromkeys(checked)))


def relative_error(expected: np.ndarray, got: np.ndarray) -> float:
    """||got - expected|| / ||expected||; inf for a shape mismatch or a non-finite value."""
    if expected.shape != got.shape or not np.isfinite(got).all():
        return float("inf")
    return float(np.linalg.norm(got - expected) / max(np.linalg.norm(expected), 1e-30))


# ---------------------------------------------------------------- the cache


def cache_key() -> dict[str, str]:
    """What a verdict depends on: the CPU, the kernel (which grants AMX its state) and
    ggml (its kernels)."""
    import llama_cpp

    from river_cpp.engine import _core

    version = _core.ggml_version()
    return {
        "cpu": cpu_model(),
        "kernel": platform.release(),
        "ggml": f"{version['version']} ({version['commit']})",
        "llama_cpp_python": llama_cpp.__version__,
    }


def cpu_model() -> str:
    """The CPU's model name as the OS reports it (its architecture where it does not)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() in ("model name", "Hardware", "cpu model"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def key_digest(key: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(key), sort_keys=True).encode()).hexdigest()[:16]


def cache_path(key: Mapping[str, str], folder: str = "extra_bufts") -> Path:
    """The verdicts file of `key` in the cache's `folder`."""
    from river_cpp.engine.files.cache import cache_dir

    return cache_dir() / folder / f"{key_digest(key)}.json"


def read_verdicts(path: Path) -> dict[str, Verdict]:
    """The verdicts stored at `path`; empty when there are none or they are unreadable."""
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))["verdicts"]
        return {name: Verdict(bool(v["usable"]), str(v["reason"])) for name, v in stored.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def write_verdicts(path: Path, key: Mapping[str, str], verdicts: Mapping[str, Verdict]) -> None:
    """Store the lasting verdicts atomically (processes probing at once write the same
    findings)."""
    lasting = {name: {"usable": v.usable, "reason": v.reason} for name, v in verdicts.items() if v.lasting}
    if not lasting:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"key": dict(key), "verdicts": lasting}
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    os.replace(partial, path)


# ---------------------------------------------------------------- the probe (child)


def run_child(name: str) -> dict:
    """The child's work: every probe product of extra buffer type `name`."""
    from river_cpp.engine import _core

    rng = np.random.default_rng(0)
    weights = rng.standard_normal((PROBE_N_OUT, PROBE_N_IN), dtype=np.float32)
    products = []
    for type_name in PROBE_TYPES:
        for n_tokens in PROBE_BATCHES:
            inputs = rng.standard_normal((n_tokens, PROBE_N_IN), dtype=np.float32)
            result = _core.probe_matmul(name, type_name, weights, inputs, n_threads=2)
            if result is not None:
                plain, extra = result
                products.append({"type": type_name, "plain": plain.tolist(), "extra": extra.tolist()})
    return {"products": products}


def child_main() -> None:
    """The child process: probe the buffer type named by its one argument, print the report."""
    if len(sys.argv) != 2:
        sys.exit("usage: python -m river_cpp.engine.probes.extra_bufts BUFFER_TYPE")
    print(json.dumps(run_child(sys.argv[1])))


if __name__ == "__main__":
    child_main()
