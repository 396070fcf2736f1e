"""Which weight types our own matrix products multiply here, and on which kernels.

Our own products (csrc/own_*) pack Q4_0, Q8_0, Q4_K, Q5_K and Q6_K matrices, those of
the other 32-value block types Q4_1, Q5_0, Q5_1 and IQ4_NL, and those of the 256-value
types of few bits Q3_K, Q2_K and IQ4_XS, once at load into a layout of their own and
compute every column with the same arithmetic whatever the batch: a verify's rows equal
plain steps bit for bit, and a prompt runs on the same kernels. They replace ggml's
kernels (and CPU_REPACK) for those types in the graph backbone; other types, devices and
the llama.cpp backbone keep ggml's.

Kernels are chosen by the CPU's features (AVX-512 VNNI, AVX2, NEON dot products, or the
scalar reference). Before they are used on a host, a short-lived child process
multiplies random matrices of every covered type by them and by ggml's plain kernels,
and this process compares the two (extra_bufts' probe machinery: a crash, a timeout or
a wrong result keeps ggml's kernels). The verdict is cached per host and set of covered
types (so that a type added later is probed before it is used).

``RIVER_CPP_OWN_PRODUCTS`` overrides: ``auto`` (default: the fastest kernels here, once
the probe passed), ``none`` (ggml's kernels), or a kernels name (``avx512vnni``,
``avx2``, ``neon``, ``i8mm``, ``reference``), used unprobed (``auto`` takes sdot over i8mm
until i8mm is timed on Arm hardware).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from river_cpp._child import python_command
from river_cpp.engine.probes.extra_bufts import Verdict, cache_key, cached_probe

ENV = "RIVER_CPP_OWN_PRODUCTS"
# The weight types our products cover, as ggml names them.
COVERED = ("q4_0", "q8_0", "q4_K", "q5_K", "q6_K", "q4_1", "q5_0", "q5_1", "iq4_nl", "q3_K", "q2_K", "iq4_xs")
BLOCK_VALUES = {
    "q4_0": 32,
    "q8_0": 32,
    "q4_K": 256,
    "q5_K": 256,
    "q6_K": 256,
    "q4_1": 32,
    "q5_0": 32,
    "q5_1": 32,
    "iq4_nl": 32,
    "q3_K": 256,
    "q2_K": 256,
    "iq4_xs": 256,
}
# Two row groups and a part one (odd rows), two K-quant blocks; one column and a batch.
PROBE_N_OUT, PROBE_N_IN, PROBE_BATCHES = 21, 512, (1, 17)
CACHE_FOLDER = "own_products"


@dataclass(frozen=True)
class OwnProducts:
    """The types our products multiply in this process, on which kernels, and why."""

    mode: str  # "auto", "none" or a kernels name
    kernels: str  # the kernels' name; "" where none are used
    types: tuple[str, ...]
    reason: str  # "probe: ok: q4_0, ...", "RIVER_CPP_OWN_PRODUCTS=none", ...

    def engine_arguments(self) -> dict[str, Any]:
        """The keyword arguments of _core.Engine that ask for these products."""
        return {"own_types": list(self.types), "own_kernels": self.kernels or "auto"}


# What a backbone that takes none of our products reports (the llama.cpp backbone).
NONE = OwnProducts("none", "", (), "not the graph backbone")


def mode_from_env() -> str:
    """The mode RIVER_CPP_OWN_PRODUCTS asks for ("auto" when unset); ValueError for others."""
    from river_cpp.engine import _core

    mode = os.environ.get(ENV, "").strip() or "auto"
    modes = ("auto", "none", *_core.own_kernels())
    if mode not in modes:
        raise ValueError(f"{ENV} must be one of {', '.join(modes)} on this CPU, got {os.environ[ENV]!r}")
    return mode


def own_products(mode: Optional[str] = None, *, reprobe: bool = False) -> OwnProducts:
    """What our products multiply: by `mode` (default: mode_from_env()); in "auto" mode
    the fastest kernels here once they passed the probe (run once per host, then cached).
    reprobe: probe again even if a verdict is cached."""
    from river_cpp.engine import _core

    mode = mode_from_env() if mode is None else mode
    if mode == "none":
        return OwnProducts(mode, "", (), f"{ENV}=none")
    if mode != "auto":
        if mode not in _core.own_kernels():
            raise ValueError(f"no own kernels {mode!r} on this CPU (it runs: {', '.join(_core.own_kernels())})")
        return OwnProducts(mode, mode, COVERED, f"{ENV}={mode}, unprobed")
    kernels = _core.own_kernels()[0]
    # a verdict holds for the types that were probed: a build that covers more probes again
    key = {**cache_key(), "probe": "own_products", "kernels": kernels, "types": ",".join(COVERED)}
    verdict: Verdict = cached_probe([kernels], key, reprobe=reprobe, command=_child_command, folder=CACHE_FOLDER)[
        kernels
    ]
    if not verdict.usable:
        return OwnProducts(mode, "", (), f"the probe of the {kernels} kernels: {verdict.reason}")
    return OwnProducts(mode, kernels, COVERED, f"the {kernels} kernels passed the probe")


def model_products(path: Union[str, Path], own: OwnProducts) -> dict[str, dict[str, Any]]:
    """Which products the graph backbone multiplies each weight type of the model at
    `path` with, on this host: {type: {"matrices": count, "product": "ours (avx2)" or
    "ggml"}}. Reads the file's header only. The token embedding counts where the model
    has no output matrix (it is then the LM head)."""
    from river_cpp.engine.files.gguf_info import GgufInfo

    info = GgufInfo.read(path)
    has_output = info.tensor("output.weight") is not None
    products: dict[str, dict[str, Any]] = {}
    for tensor in info.tensors:
        if len(tensor.shape) != 2 or tensor.type in ("f32",) or not tensor.name.endswith(".weight"):
            continue
        if tensor.name == "token_embd.weight" and has_output:
            continue  # only looked up, never multiplied
        ours = tensor.type in own.types and int(tensor.shape[0]) % BLOCK_VALUES[tensor.type] == 0
        entry = products.setdefault(
            tensor.type, {"matrices": 0, "product": f"ours ({own.kernels})" if ours else "ggml"}
        )
        entry["matrices"] += 1
    return products


def _child_command(kernels: str) -> list[str]:
    return python_command("from river_cpp.engine.probes.own_products import child_main; child_main()", kernels)


def run_child(kernels: str) -> dict:
    """The child's work: each covered type's probe products by ggml's plain kernels and
    by `kernels`, in extra_bufts.judge's report format."""
    from river_cpp.engine import _core

    rng = np.random.default_rng(0)
    weights = rng.standard_normal((PROBE_N_OUT, PROBE_N_IN), dtype=np.float32)
    products = []
    for type_name in COVERED:
        data = _core.quantize_rows(type_name, weights)
        for n_tokens in PROBE_BATCHES:
            inputs = rng.standard_normal((n_tokens, PROBE_N_IN), dtype=np.float32)

            def product(own: str, type_name=type_name, data=data, inputs=inputs) -> list:
                return _core.row_products(
                    type_name, data, PROBE_N_OUT, PROBE_N_IN, inputs, n_threads=2, own=own
                ).tolist()

            products.append({"type": type_name, "plain": product(""), "extra": product(kernels)})
    return {"products": products}


def child_main() -> None:
    """The child process: probe the kernels named by its one argument, print the report."""
    if len(sys.argv) != 2:
        sys.exit("usage: python -m river_cpp.engine.probes.own_products KERNELS")
    print(json.dumps(run_child(sys.argv[1])))


if __name__ == "__main__":
    child_main()
