"""Our own products' Arm kernels (csrc/own_kernels_arm.inc) hold the reference's bits: the
NEON ones (sdot, own_kernels_neon.cpp) and the i8mm ones (smmla for pairs of columns,
own_kernels_i8mm.cpp).

A driver (own_kernels_driver.cpp) is built with an aarch64 cross compiler from the own
products' sources, as CMakeLists.txt compiles them, and run under qemu-user on an emulated
CPU with both extensions (`-cpu max`); own_kernels_check.py compares its products. CPU
models without them check that each table is offered only where its instructions run.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from own_kernels_check import CSRC, DRIVER, TYPES, assert_the_references_bits, ggml_include, run

SOURCES = [
    DRIVER,
    *(CSRC / name for name in ("own_quant.cpp", "own_kernels.cpp", "own_kernels_neon.cpp", "own_kernels_i8mm.cpp")),
    # x86's tables, which build to nullptr on aarch64 (own_kernels.cpp asks them)
    *(CSRC / name for name in ("own_kernels_avx2.cpp", "own_kernels_vnni.cpp")),
]
INSTALL = "apt-get install g++-aarch64-linux-gnu qemu-user"


def _tools() -> tuple[str, str]:
    compiler = shutil.which("aarch64-linux-gnu-g++")
    qemu = shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
    if not compiler or not qemu:
        missing = " and ".join(n for n, p in (("aarch64-linux-gnu-g++", compiler), ("qemu-aarch64", qemu)) if not p)
        pytest.skip(f"the NEON kernels' test needs {missing}: {INSTALL}")
    return compiler, qemu


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> list[str]:
    """The command that runs the aarch64 driver under qemu on a CPU with dot products and
    int8 matrix products."""
    compiler, qemu = _tools()
    binary = tmp_path_factory.mktemp("neon") / "own_kernels_driver"
    # -ffp-contract=off as CMakeLists.txt compiles the own products' files
    build = [compiler, "-std=c++17", "-O2", "-ffp-contract=off", "-static", f"-I{CSRC}", f"-I{ggml_include()}"]
    done = subprocess.run([*build, *map(str, SOURCES), "-o", str(binary)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return [qemu, "-cpu", "max", str(binary)]


def test_each_table_is_offered_only_where_the_cpu_has_its_instructions(driver):
    qemu, _, _, binary = driver
    # sdot first (what `auto` takes), i8mm after it until timed on Arm hardware
    assert run(driver + ["kernels"]).split() == ["neon", "i8mm", "reference"]
    # Armv8.2 cores with sdot but no smmla: the i8mm kernels would not run there
    for cpu in ("cortex-a76", "neoverse-n1"):
        assert run([qemu, "-cpu", cpu, binary, "kernels"]).split() == ["neon", "reference"], cpu
    # an Armv8.0 core: no sdot, so the reference alone
    assert run([qemu, "-cpu", "cortex-a53", binary, "kernels"]).split() == ["reference"]


# (CPU model, kernels, whether they run there)
FAULTS = [("cortex-a76", "i8mm", False), ("cortex-a76", "neon", True), ("cortex-a53", "neon", False)]


def test_the_cpu_models_lack_what_the_tables_skip(driver, tmp_path):
    """The fallbacks above are real: qemu's cortex-a76 faults on the i8mm kernels (and
    runs the NEON ones), its cortex-a53 on the NEON ones."""
    qemu, _, _, binary = driver
    (tmp_path / "rows").write_bytes(bytes(18 * 8))  # 8 rows of one Q4_0 block, all zero
    (tmp_path / "columns").write_bytes(bytes(4 * 32 * 2))  # 2 columns of 32 zeros
    files = [str(tmp_path / name) for name in ("rows", "columns", "out")]
    for cpu, kernels, runs in FAULTS:
        command = [qemu, "-cpu", cpu, binary, "products", kernels, "q4_0", "32", *files, "8", "2"]
        done = subprocess.run(command, capture_output=True, timeout=600)
        assert (done.returncode == 0) == runs, (cpu, kernels, done.returncode)


@pytest.mark.parametrize("kernels", ["neon", "i8mm"])
@pytest.mark.parametrize("type_name", TYPES)
def test_arm_products_are_the_references_bits(driver, kernels, type_name, tmp_path):
    assert_the_references_bits(driver, kernels, type_name, tmp_path)
