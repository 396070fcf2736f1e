"""Command lines for the Python child processes river-cpp starts (the CPU's extra
buffer type probe, the peak-memory probe): they import the very river_cpp this
process runs.

`python -m ...` and `python -c ...` put the working folder first on sys.path, so a
child started from a checkout would import the source tree there (which has no built
_core) rather than the installed package. These children run isolated (-I: no working
folder, no PYTHON* variables, no user site) and get this process's import path, the
folder its river_cpp came from first.
"""

from __future__ import annotations

import sys
from pathlib import Path


def python_command(code: str, *args: str) -> list[str]:
    """This interpreter running `code` (sys.argv[1:] = args) with this process's
    river_cpp and import path, whatever the child's working folder holds."""
    package_root = str(Path(__file__).resolve().parent.parent)
    paths = list(dict.fromkeys([package_root, *(p for p in sys.path if p)]))
    return [sys.executable, "-I", "-c", f"import sys; sys.path[:0] = {paths!r}\n{code}", *args]
