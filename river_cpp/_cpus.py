"""The CPU threads a run uses by default, without loading the engine (the CLI's parsers
declare it before anything heavy is imported)."""

from __future__ import annotations

import os


def default_n_threads() -> int:
    """All cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
