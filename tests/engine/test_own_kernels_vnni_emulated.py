"""Our own products' AVX-512 VNNI kernels (own_kernels_vnni.cpp) hold the reference's bits,
on any CPU with AVX2, FMA and F16C.

Most hosts (laptops, AMD's Zen 3) lack AVX-512, so test_own_products.py never runs these
kernels there. Here csrc/own_kernels_vnni.cpp itself is compiled for AVX2 alone, with
vnni_emulation.h force-included: it stands exact AVX2 code in for the two VNNI
instructions the kernels use (vpdpbusd, vpdpwssd), so the rest of the source compiles as
it is (an AVX-512 intrinsic besides those two would not compile: the test fails, and says
so). own_kernels_driver.cpp, built with it natively, writes its products, and
own_kernels_check.py holds them to the reference's bits. On a host with AVX-512 VNNI,
test_own_products.py runs the real instructions too.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest
from own_kernels_check import CSRC, DRIVER, TYPES, assert_the_references_bits, ggml_include, run

from river_cpp.engine import _core

HERE = Path(__file__).parent
EMULATION = HERE / "vnni_emulation.h"
X86 = ["-mavx2", "-mfma", "-mf16c"]  # as CMakeLists.txt compiles own_kernels_avx2.cpp
# each source with the flags CMakeLists.txt gives it, but AVX-512's: own_kernels_vnni.cpp
# for AVX2, with the emulation force-included
SOURCES = [
    (DRIVER, []),
    (CSRC / "own_quant.cpp", []),
    (CSRC / "own_kernels.cpp", []),
    (CSRC / "own_kernels_neon.cpp", []),  # nullptr on x86 (own_kernels.cpp asks it)
    (CSRC / "own_kernels_i8mm.cpp", []),  # nullptr on x86 too
    (CSRC / "own_kernels_avx2.cpp", X86),
    (CSRC / "own_kernels_vnni.cpp", [*X86, "-include", str(EMULATION)]),
]


def _compiler() -> str:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip(f"the emulated VNNI kernels are x86's: this host is {platform.machine()}")
    if "avx2" not in _core.own_kernels():
        pytest.skip("the emulated VNNI kernels need a CPU with AVX2, FMA and F16C; this one lacks them")
    compiler = shutil.which("g++")
    if not compiler:
        pytest.skip("the emulated VNNI kernels' test needs g++ (apt-get install g++)")
    return compiler


def _build(compiler: str, sources: list[tuple[Path, list[str]]], binary: Path) -> None:
    """Compiles each source with its flags (all at once), then links them into binary."""
    # -ffp-contract=off as CMakeLists.txt compiles the own products' files
    common = [compiler, "-std=c++17", "-O2", "-ffp-contract=off", f"-I{CSRC}", f"-I{ggml_include()}"]
    objects = [binary.with_name(f"{source.stem}.o") for source, _ in sources]
    jobs = [
        subprocess.Popen([*common, *flags, "-c", str(source), "-o", str(obj)], stderr=subprocess.PIPE, text=True)
        for (source, flags), obj in zip(sources, objects)
    ]
    for (source, _), job in zip(sources, jobs):
        _, errors = job.communicate(timeout=600)
        assert job.returncode == 0, f"{source.name}:\n{errors}"
    run([compiler, *map(str, objects), "-o", str(binary)])


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> list[str]:
    """The command that runs the driver with the emulated VNNI kernels."""
    compiler = _compiler()
    binary = tmp_path_factory.mktemp("vnni_emulated") / "own_kernels_driver"
    _build(compiler, SOURCES, binary)
    return [str(binary)]


def test_the_emulation_is_the_instructions_definition(tmp_path):
    """vnni_emulation.h's vpdpbusd and vpdpwssd, lane by lane, against their definition:
    exact sums of the products, wrapped to 32 bits."""
    binary = tmp_path / "vnni_emulation_check"
    _build(_compiler(), [(HERE / "vnni_emulation_check.cpp", X86)], binary)
    assert run([str(binary)]).strip() == "ok"


@pytest.mark.parametrize("type_name", TYPES)
def test_vnni_products_are_the_references_bits(driver, type_name, tmp_path):
    assert_the_references_bits(driver, "avx512vnni", type_name, tmp_path)
