"""Our own products' NEON kernels (csrc/own_kernels_neon.cpp) hold the reference's bits.

A driver (own_kernels_driver.cpp) is built with an aarch64 cross compiler from the own
products' sources, as CMakeLists.txt compiles them, and run under qemu-user on an emulated
CPU with the dot-product extension. It packs GGUF rows that ggml quantized here, quantizes
float columns, and writes the products of the reference and of the NEON kernels, which
must be the same bits: at every column count, whichever columns share a call, and equal
to this host's reference product (_core.row_products with own="reference"), since both
are plain IEEE arithmetic.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from river_cpp.engine import _core

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [
    Path(__file__).with_name("own_kernels_driver.cpp"),
    *(ROOT / "csrc" / name for name in ("own_quant.cpp", "own_kernels.cpp", "own_kernels_neon.cpp")),
    # x86's tables, which build to nullptr on aarch64 (own_kernels.cpp asks them)
    *(ROOT / "csrc" / name for name in ("own_kernels_avx2.cpp", "own_kernels_vnni.cpp")),
]
INSTALL = "apt-get install g++-aarch64-linux-gnu qemu-user"

TYPES = ["q4_0", "q8_0", "q4_k", "q5_k", "q6_k", "q4_1", "q5_0", "q5_1", "iq4_nl", "q3_k", "q2_k", "iq4_xs"]
N_IN = 768  # 3 blocks of the 256-value types, 24 of the 32-value types
# one whole row group; a pair of them and a part group (padded with zero rows); a pair,
# a whole group alone and a part group (the kernels take 1 or 2 groups a call)
ROW_COUNTS = (8, 21, 27)
COLUMN_COUNTS = (1, 2, 3, 5, 17, 33)
KERNELS = ("reference", "neon")  # in the driver's order


def _tools() -> tuple[str, str]:
    compiler = shutil.which("aarch64-linux-gnu-g++")
    qemu = shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
    if not compiler or not qemu:
        missing = " and ".join(n for n, p in (("aarch64-linux-gnu-g++", compiler), ("qemu-aarch64", qemu)) if not p)
        pytest.skip(f"the NEON kernels' test needs {missing}: {INSTALL}")
    return compiler, qemu


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> list[str]:
    """The command that runs the aarch64 driver under qemu on a CPU with dot products."""
    compiler, qemu = _tools()
    # ggml's headers as llama-cpp-python installs them (own_quant.h needs ggml.h's type enum)
    ggml_include = Path(llama_cpp.__file__).parent.parent / "include"
    assert (ggml_include / "ggml.h").is_file(), f"no ggml.h in {ggml_include}"
    binary = tmp_path_factory.mktemp("neon") / "own_kernels_driver"
    # -ffp-contract=off as CMakeLists.txt compiles the own products' files
    build = [compiler, "-std=c++17", "-O2", "-ffp-contract=off", "-static", f"-I{ROOT / 'csrc'}", f"-I{ggml_include}"]
    done = subprocess.run([*build, *map(str, SOURCES), "-o", str(binary)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return [qemu, "-cpu", "max", str(binary)]


def _run(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _assert_same_bits(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert actual.shape == expected.shape, what
    np.testing.assert_array_equal(actual.view(np.uint32), expected.view(np.uint32), err_msg=what)


def test_neon_is_offered_only_where_the_cpu_has_dot_products(driver):
    qemu, _, _, binary = driver
    assert _run(driver + ["kernels"]).split() == ["neon", "reference"]
    # an Armv8.0 core: no sdot, so the reference alone
    assert _run([qemu, "-cpu", "cortex-a53", binary, "kernels"]).split() == ["reference"]


@pytest.mark.parametrize("type_name", TYPES)
def test_neon_products_are_the_references_bits(driver, type_name, tmp_path):
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
    _run(driver + ["products", type_name, str(N_IN), str(rows_file), str(columns_file), str(out), *counts])

    values = np.fromfile(out, np.float32)
    at = 0

    def take(n: int, rows: int) -> np.ndarray:
        nonlocal at
        at += n * rows
        return values[at - n * rows : at].reshape(n, rows)

    for rows in ROW_COUNTS:
        alone = {}
        for kernels in KERNELS:
            alone[kernels] = take(n_cols, rows)
            for n in COLUMN_COUNTS:
                _assert_same_bits(take(n, rows), alone[kernels][:n], f"{kernels}: {rows} rows x {n} columns")
        host = _core.row_products(type_name, data[: rows * row_bytes], rows, N_IN, columns, own="reference")
        assert np.isfinite(host).all() and np.count_nonzero(host) > 0
        _assert_same_bits(alone["reference"], host, f"aarch64's reference, {rows} rows: this host's")
        _assert_same_bits(alone["neon"], alone["reference"], f"neon, {rows} rows: the reference")
    assert at == values.size, "the driver wrote more than the test reads"
