"""Our own products' NEON kernels (csrc/own_kernels_neon.cpp) hold the reference's bits.

A driver (own_kernels_driver.cpp) is built with an aarch64 cross compiler from the own
products' sources, as CMakeLists.txt compiles them, and run under qemu-user on an emulated
CPU with the dot-product extension; own_kernels_check.py compares its products.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from own_kernels_check import CSRC, DRIVER, TYPES, assert_the_references_bits, ggml_include, run

SOURCES = [
    DRIVER,
    *(CSRC / name for name in ("own_quant.cpp", "own_kernels.cpp", "own_kernels_neon.cpp")),
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
    """The command that runs the aarch64 driver under qemu on a CPU with dot products."""
    compiler, qemu = _tools()
    binary = tmp_path_factory.mktemp("neon") / "own_kernels_driver"
    # -ffp-contract=off as CMakeLists.txt compiles the own products' files
    build = [compiler, "-std=c++17", "-O2", "-ffp-contract=off", "-static", f"-I{CSRC}", f"-I{ggml_include()}"]
    done = subprocess.run([*build, *map(str, SOURCES), "-o", str(binary)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return [qemu, "-cpu", "max", str(binary)]


def test_neon_is_offered_only_where_the_cpu_has_dot_products(driver):
    qemu, _, _, binary = driver
    assert run(driver + ["kernels"]).split() == ["neon", "reference"]
    # an Armv8.0 core: no sdot, so the reference alone
    assert run([qemu, "-cpu", "cortex-a53", binary, "kernels"]).split() == ["reference"]


@pytest.mark.parametrize("type_name", TYPES)
def test_neon_products_are_the_references_bits(driver, type_name, tmp_path):
    assert_the_references_bits(driver, "neon", type_name, tmp_path)
