"""Structured output: constrained chat completions against llama-cpp-python:
a command line over river_bench.structured_output (its docstring says what is
timed and how to read it).

    python benchmarks/structured_output.py --help
"""

from __future__ import annotations

from typing import Optional, Sequence

from river_bench import structured_output


def main(argv: Optional[Sequence[str]] = None) -> object:
    return structured_output.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
