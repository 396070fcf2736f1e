"""Running generated code: each program in a fresh, isolated `python -I` child.

Owns the child's confinement (an empty temporary folder, a minimal environment, no
stdin, its own session, an address-space cap) and its timeout, at which the whole
process group is killed. Never executes generated code in this process; knows
nothing of HumanEval's problems.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

DEFAULT_TIMEOUT = 10.0
# What a child process may write back: enough for a traceback's last lines.
OUTPUT_TAIL_CHARS = 2000
# Generated code should not be able to take the machine's memory.
CHILD_MEMORY_LIMIT_BYTES = 4 << 30


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
            [sys.executable, "-I", script.name],
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
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
