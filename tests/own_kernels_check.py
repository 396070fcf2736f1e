"""Holds a kernels set of our own products, built into tests/engine/own_kernels_driver.cpp
for a CPU this host is not, to the reference's bits: the NEON and i8mm kernels under qemu
(test_own_kernels_neon.py) and the AVX-512 VNNI kernels' source with its two VNNI
instructions emulated on AVX2 (test_own_kernels_vnni_emulated.py).

The driver packs GGUF rows that ggml quantized here, quantizes float columns, and writes
the products of the reference and of the kernels set, which must be the same bits: at
every column count, whichever columns share a call, and equal to this host's reference
product (_core.row_products with own="reference"), since both are plain IEEE arithmetic.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import llama_cpp
import numpy as np

from river_cpp.engine import _core
from river_cpp.engine.probes import own_products as op

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"
DRIVER = Path(__file__).with_name("engine") / "own_kernels_driver.cpp"
# every covered type, as the driver names them
TYPES = [name.lower() for name in op.COVERED]
N_IN = 768  # 3 blocks of the 256-value types, 24 of the 32-value types
# one whole row group; a pair of them and a part group (padded with zero rows); a pair,
# a whole group alone and a part group (the kernels take 1 or 2 groups a call)
ROW_COUNTS = (8, 21, 27)
# single columns, x86's tiles of 2 and 4 (AVX2, AVX-512 VNNI), NEON's and i8mm's of 2,
# and tails (an odd last column: i8mm's by sdot)
COLUMN_COUNTS = (1, 2, 3, 4, 5, 17, 33)


def ggml_include() -> Path:
    """ggml's headers as llama-cpp-python installs them (own_quant.h needs ggml.h's type enum)."""
    include = Path(llama_cpp.__file__).parent.parent / "include"
    assert (include / "ggml.h").is_file(), f"no ggml.h in {include}"
    return include


def run(command: list[str]) -> str:
    """The command's output; fails the test, with its errors, where it fails."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _assert_same_bits(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert actual.shape == expected.shape, what
    np.testing.assert_array_equal(actual.view(np.uint32), expected.view(np.uint32), err_msg=what)


def assert_the_references_bits(driver: list[str], kernels: str, type_name: str, tmp_path: Path) -> None:
    """The products of `kernels` by the driver (its command) are the reference's bits, for
    rows of `type_name` of varied scale and offset and columns of varied scale."""
    rng = np.random.default_rng(TYPES.index(type_name))
    n_rows = max(ROW_COUNTS)
    # rows of varied scale and offset (so that the mins of the K-quants, Q4_1 and Q5_1 matter)
    scale, offset = 10.0 ** rng.uniform(-2, 1, (n_rows, 1)), rng.normal(0, 0.5, (n_rows, 1))
    data = _core.quantize_rows(type_name, (rng.standard_normal((n_rows, N_IN)) * scale + offset).astype(np.float32))
    row_bytes = data.size // n_rows
    n_cols = max(COLUMN_COUNTS)
    columns = (rng.standard_normal((n_cols, N_IN)) * 10.0 ** rng.uniform(-2, 2, (n_cols, 1))).astype(np.float32)
    columns[3] = 0.0  # a column of zeros: its blocks' scale is 0
    rows_file, columns_file, out = tmp_path / "rows", tmp_path / "columns", tmp_path / "out"
    data.tofile(rows_file)
    columns.tofile(columns_file)
    counts = [",".join(map(str, c)) for c in (ROW_COUNTS, COLUMN_COUNTS)]
    run(driver + ["products", kernels, type_name, str(N_IN), str(rows_file), str(columns_file), str(out), *counts])

    values = np.fromfile(out, np.float32)
    at = 0

    def take(n: int, rows: int) -> np.ndarray:
        nonlocal at
        at += n * rows
        return values[at - n * rows : at].reshape(n, rows)

    for rows in ROW_COUNTS:
        alone = {}
        for name in ("reference", kernels):  # in the driver's order
            alone[name] = take(n_cols, rows)
            for n in COLUMN_COUNTS:
                _assert_same_bits(take(n, rows), alone[name][:n], f"{name}: {rows} rows x {n} columns")
        host = _core.row_products(type_name, data[: rows * row_bytes], rows, N_IN, columns, own="reference")
        assert np.isfinite(host).all() and np.count_nonzero(host) > 0
        _assert_same_bits(alone["reference"], host, f"the driver's reference, {rows} rows: this host's")
        _assert_same_bits(alone[kernels], alone["reference"], f"{kernels}, {rows} rows: the reference")
    assert at == values.size, "the driver wrote more than the test reads"
