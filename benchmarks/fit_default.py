"""The default against plain decoding of the same model, and peak memory:
a command line over river_bench.fit_default (its docstring says what is
timed and how to read it).

    python benchmarks/fit_default.py --help
"""

from __future__ import annotations

from typing import Optional, Sequence

from river_bench import fit_default


def main(argv: Optional[Sequence[str]] = None) -> object:
    return fit_default.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
