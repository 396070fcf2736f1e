"""How a model loads, as one frozen value checked once: the backbone, the river, the
cache's size, threads and devices.

What a model decodes by default (the exit policy, the draft, the sampling seed) is not
here: river_cpp.decoding.decision resolves that per call. The prompt cache is not here
either: it is an object with a life of its own, which several models may share.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

from river_cpp._cpus import n_threads_or_default

ENGINES = ("auto", "graph", "llama.cpp")
PREFILL_MODES = ("backbone", "exit")
# RiverModel's `exact` and the engine's name for each mode.
EXACT_MODES = {True: "on", False: "off", "on": "on", "off": "off", "bitwise": "bitwise"}
# The river the default builds: the type that wins on the file at hand, or none
# (river_cpp.engine.decisions.river_choice).
AUTO_RIVER = "auto"
# The types the KV cache stores K and V in (csrc/kv_cache.h), by name, with llama.cpp's
# GGML_TYPE number of each (llama-cpp-python's type_k / type_v take those).
KV_CACHE_TYPES = {"f16": 1, "q8_0": 8}


def positive_int(name: str, value: object) -> int:
    """`value` (an integer, numpy's included, not a bool) as an int when positive;
    ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def kv_cache_type(name: str, value: object) -> str:
    """The KV cache type option `name` ("type_k" or "type_v") asks for, as its name: a
    name of KV_CACHE_TYPES (any case), llama.cpp's GGML_TYPE number of one, or None (the
    default, f16); ValueError otherwise."""
    if value is None:
        return "f16"
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        for type_name, number in KV_CACHE_TYPES.items():
            if value == number:
                return type_name
    elif isinstance(value, str) and value.lower() in KV_CACHE_TYPES:
        return value.lower()
    choices = ", ".join(f"{n!r} ({number})" for n, number in KV_CACHE_TYPES.items())
    raise ValueError(f"{name} must be one of {choices} (a name or llama.cpp's GGML_TYPE number), got {value!r}")


def _non_negative_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class LoadOptions:
    """How RiverModel loads a GGUF; every field is checked when the value is made.

    n_ctx: positions of the KV cache (of each sequence).
    n_seq_max: sequences the KV cache holds, n_ctx positions each: generations on
        several threads each take one and their forwards run together, every answer
        as if alone (river_cpp.engine.compute.scheduler; the graph backbone; llama.cpp's
        serves one sequence at a time).
    n_threads: threads of a forward (None: river_cpp._cpus.default_n_threads(), resolved
        here once).
    engine: the backbone (river_cpp.engine.decisions.backbone_choice): "auto" river-cpp's graph
        where it builds the file's architecture, llama.cpp's own context otherwise;
        "graph" or "llama.cpp" as named. llama.cpp's has no river.
    river: "auto": the river type that wins on this file and thread count, or none
        (river_cpp.engine.decisions.river_choice); a ggml type name ("q4_0", "q4_k", "iq4_nl",
        "q5_k", "q6_k", "q8_0"): build (once, cached) a river of that type; the path
        of a river GGUF made for this backbone; or None for the backbone alone.
    river_types: per-layer overrides of the river type, e.g. {28: "q8_0"}.
    river_head: the LM head of exited tokens. None: a Q4_0 head built with the river,
        or a given river file's own head; False: the backbone's; True: a head of the
        river's type; a type name: that type.
    prefill: "backbone" (the prompt runs the full backbone, so its KV is full
        precision) or "exit" (the prompt exits at one depth, as decode tokens do).
    tail_layers: exited tokens return to the backbone for the last m layers.
    progress: show progress bars while a river or backbone is built.
    use_mmap: map the files (pages load on demand and are shared between processes),
        or read them into memory (False): for files that may change while loaded.
    n_gpu_layers: backbone layers on the GPU (or other device): -1 all that fit, 0
        none; on the graph the KV cache and the river go first
        (river_cpp.engine.compute.placement).
    main_gpu: the device to fill first, as an index into the offloading devices.
    rpc_servers: "host:port" of `river-cpp rpc-server`s whose devices join the
        placement (the graph backbone; ggml built with -DGGML_RPC=on).
    reuse_graphs: keep decode graphs for later steps; False builds each afresh.
    exact: a verify's rows computed as plain one-token steps compute them, bit for
        bit (the graph on the CPU): True for quantized matrices in the plain layout and
        attention; "bitwise" also for F32/F16/BF16 matrices, kept out of the CPU's
        repacked layouts (slower); False: ggml's kernels by batch size.
    own_attention: attention by river-cpp's own op (the graph backbone) in every layer
        that computes on the CPU over a KV cache in host memory: every row is the same
        bits however a prompt is cut or batched, so a turn served from the cache is the
        cold conversation's. Layers on a GPU, Vulkan or RPC device, or over a cache
        there, keep ggml's attention (`model.attention` says which runs where). False:
        ggml's attention everywhere, whose prompt rows differ in the last bits from the
        steps that compute them and by where the prompt was cut.
    type_k, type_v: the types the KV cache stores K and V in: "f16" (the default) or
        "q8_0" (blocks of 32 values and one F16 scale: about half the bytes, a small
        loss against F16); llama.cpp's GGML_TYPE numbers (1, 8) are taken too. Every
        path reads the same quantized cache, so own_attention's identities hold with
        it. The graph backbone with the cache in host memory (n_gpu_layers=0 on a
        machine with a GPU); a quantized V needs our attention in every layer.
    adapt_threads: run one thread fewer per CPU that other processes keep busy
        (river_cpp._cpus.ThreadGovernor), so decoding keeps its share of a loaded machine.
    verbose: llama.cpp's and river-cpp's load logs on stderr.
    """

    n_ctx: int = 2048
    n_seq_max: int = 1
    n_threads: Optional[int] = None
    engine: str = "auto"
    river: Union[str, os.PathLike, None] = AUTO_RIVER
    river_types: Optional[Mapping[int, str]] = None
    river_head: Union[bool, str, None] = None
    prefill: str = "backbone"
    tail_layers: int = 0
    progress: bool = True
    use_mmap: bool = True
    n_gpu_layers: int = -1
    main_gpu: int = 0
    rpc_servers: tuple[str, ...] = field(default=())
    reuse_graphs: bool = True
    exact: Union[bool, str] = True
    own_attention: bool = True
    type_k: Union[str, int, None] = "f16"
    type_v: Union[str, int, None] = "f16"
    adapt_threads: bool = True
    verbose: bool = False

    def __post_init__(self) -> None:
        def set_(name: str, value: Any) -> None:  # frozen: checked values are set once, here
            object.__setattr__(self, name, value)

        set_("n_ctx", positive_int("n_ctx", self.n_ctx))
        set_("n_seq_max", positive_int("n_seq_max", self.n_seq_max))
        set_("n_threads", positive_int("n_threads", n_threads_or_default(self.n_threads)))
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {self.engine!r}")
        if self.prefill not in PREFILL_MODES:
            raise ValueError(f"prefill must be one of {PREFILL_MODES}, got {self.prefill!r}")
        set_("tail_layers", _non_negative_int("tail_layers", self.tail_layers))
        if not isinstance(self.exact, (bool, str)) or self.exact not in EXACT_MODES:
            raise ValueError(f"exact must be True, False or 'bitwise', got {self.exact!r}")
        set_("main_gpu", _non_negative_int("main_gpu", self.main_gpu))
        if isinstance(self.rpc_servers, str):
            raise TypeError(
                f"rpc_servers must be a sequence of 'host:port' strings, got the string {self.rpc_servers!r}"
            )
        set_("rpc_servers", tuple(str(s) for s in self.rpc_servers))
        if self.river_types is not None:
            set_("river_types", dict(self.river_types))
        set_("type_k", kv_cache_type("type_k", self.type_k))
        set_("type_v", kv_cache_type("type_v", self.type_v))
        if self.type_v != "f16" and not self.own_attention:
            raise ValueError(
                f"type_v={self.type_v!r} needs own_attention=True: only river-cpp's own attention reads a "
                "quantized V cache"
            )
        if self.river is not None and not isinstance(self.river, (str, os.PathLike)):
            raise TypeError(f"river must be 'auto', a type name, a river file or None, got {self.river!r}")

    @property
    def engine_exact(self) -> str:
        """The engine's name of the exact mode: "on", "off" or "bitwise"."""
        return EXACT_MODES[self.exact]

    @property
    def auto_river(self) -> bool:
        """Whether the river is the default's to choose."""
        return isinstance(self.river, str) and self.river.lower() == AUTO_RIVER

    def replace(self, **changes: Any) -> LoadOptions:
        """A copy with `changes`, checked as a new value is."""
        return dataclasses.replace(self, **changes)
