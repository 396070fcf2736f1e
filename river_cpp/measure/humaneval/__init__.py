"""HumanEval pass@1 of the backbone, River and llama.cpp peers: `river-cpp humaneval`.

Split by concern: .runner (problems, results, report, the run), .completers (greedy
completions through the one generation loop), .sandbox (each program in an isolated
child process, killed at its timeout).
"""

from river_cpp.measure.humaneval.completers import (
    STOP_SEQUENCES,
    Completer,
    Completion,
    ModelCompleter,
    truncate_at_stops,
)
from river_cpp.measure.humaneval.runner import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_N_CTX,
    DEFAULT_PROBLEMS,
    FILE_FORMAT,
    INSTALL_HINT,
    ConfigResult,
    HumanEvalReport,
    Problem,
    ProblemResult,
    Target,
    evaluate,
    load_problems,
    program_for,
    run_humaneval,
    select_problems,
    subset_indices,
)
from river_cpp.measure.humaneval.sandbox import DEFAULT_TIMEOUT, Execution, run_program

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_N_CTX",
    "DEFAULT_PROBLEMS",
    "DEFAULT_TIMEOUT",
    "FILE_FORMAT",
    "INSTALL_HINT",
    "STOP_SEQUENCES",
    "Completer",
    "Completion",
    "ConfigResult",
    "Execution",
    "HumanEvalReport",
    "ModelCompleter",
    "Problem",
    "ProblemResult",
    "Target",
    "evaluate",
    "load_problems",
    "program_for",
    "run_humaneval",
    "run_program",
    "select_problems",
    "subset_indices",
    "truncate_at_stops",
]
